#include <mpi.h>

#include <cstdio>

#include "apps/commands/commands.h"
#include "apps/commands/train_flags.h"
#include "comm/mpi_communicator.h"
#include "train/trainer.h"

namespace occ::cmd {

namespace {
// MPI for the lifetime of a command (works under mpirun and as a singleton).
struct MpiRuntime {
  MpiRuntime(int& argc, char**& argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    OCC_CHECK(provided >= MPI_THREAD_MULTIPLE, "this MPI library does not support MPI_THREAD_MULTIPLE");
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
  ~MpiRuntime() { MPI_Finalize(); }
  int rank = 0, size = 1;
};

// Thrown after a failure has been reported once for the whole job.
struct ReportedFailure {};

// Runs a setup step on every rank, then agrees: if any rank failed, the
// lowest failing rank prints its message (once for the job) and every rank
// exits non-zero. Only local work may run inside `step` (no collectives), so
// a failing rank cannot leave the others waiting.
template <class F>
void agree(const MpiRuntime& mpi, F&& step) {
  std::string error;
  try {
    step();
  } catch (const Error& e) {
    error = e.what();
  }
  int first_failed = error.empty() ? mpi.size : mpi.rank;
  MPI_Allreduce(MPI_IN_PLACE, &first_failed, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first_failed == mpi.size) return;
  if (mpi.rank == first_failed) {
    std::fprintf(stderr, "error: %s%s\n", error.c_str(),
                 mpi.size > 1 ? fmt::format(" (rank {})", mpi.rank).c_str() : "");
    std::fflush(stderr);
  }
  throw ReportedFailure{};
}
}  // namespace

int train(int argc, char** argv) {
  CLI::App app{"Train a GPT model (Megatron flag names; --config FILE.json accepted). Launch with mpirun -np N for "
               "TP x PP x DP parallelism.",
               "train"};
  TrainOptions opt;
  add_train_flags(app, opt);
  app.add_option("--vocab-size", opt.model.vocab_size, "vocabulary size when no --tokenizer-model is given");
  MpiRuntime mpi(argc, argv);
  std::unique_ptr<Trainer> trainer;
  try {
    int rc = -1;
    agree(mpi, [&] { rc = parse_command_line(app, argc, argv); });
    if (rc >= 0) return rc;
    agree(mpi, [&] { trainer = std::make_unique<Trainer>(opt, mpi.rank, mpi.size); });
    trainer->connect(opt.comm_timeout_s);
    agree(mpi, [&] { trainer->load(); });
    trainer->announce_compression_state();
  } catch (const ReportedFailure&) {
    return 1;
  }
  // From here on a failure on one rank aborts the whole job.
  try {
    trainer->run();
  } catch (const Error& e) {
    if (mpi.size == 1) throw;
    abort_job(fmt::format("{} (rank {})", e.what(), mpi.rank));
  }
  trainer.reset();
  return 0;
}

}  // namespace occ::cmd
