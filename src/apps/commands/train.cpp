#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "apps/commands/commands.h"
#include "apps/commands/mpi_runtime.h"
#include "apps/commands/train_flags.h"
#include "comm/mpi_communicator.h"
#include "core/heartbeat.h"
#include "train/exit_signals.h"
#include "train/run_lock.h"
#include "train/trainer.h"

namespace occ::cmd {

namespace {
uint64_t fnv1a(const std::string& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Every rank must run the same math: an MPMD launch with different flags, or
// another build of optimus-cc on some node, would otherwise train wrongly
// without a word. Collective; every rank reaches the verdict on the same data.
void check_ranks_agree(const MpiRuntime& mpi, const TrainOptions& opt) {
  std::ifstream exe("/proc/self/exe", std::ios::binary);
  const std::string image((std::istreambuf_iterator<char>(exe)), std::istreambuf_iterator<char>());
  const uint64_t mine[2] = {fnv1a(opt.math_json().dump()), image.empty() ? 0 : fnv1a(image)};
  std::vector<uint64_t> all(size_t(2 * mpi.size));
  MPI_Allgather(mine, 2, MPI_UINT64_T, all.data(), 2, MPI_UINT64_T, MPI_COMM_WORLD);
  if (mpi.rank != 0) return;  // rank 0 names the first rank that differs from it (agree() reports it)
  for (int r = 1; r < mpi.size; ++r) {
    OCC_CHECK(all[size_t(2 * r)] == all[0],
              "rank {} was started with flags that change the math differently from rank 0's (an MPMD launch?); "
              "start every rank with the same flags",
              r);
    OCC_CHECK(all[size_t(2 * r) + 1] == all[1],
              "rank {} runs a different optimus-cc binary from rank 0's; install the same build on every node", r);
  }
}

// Every rank resumes the same checkpoint, or every rank none (collective): a
// --load folder not shared between the nodes would otherwise let some ranks
// train from scratch (Megatron's resume pattern) or from another save.
void check_same_resume(const MpiRuntime& mpi, const TrainOptions& opt, const Trainer& trainer) {
  const long long mine = trainer.resume_iteration().value_or(-1);
  long long range[2] = {mine, -mine};  // the highest and minus the lowest
  MPI_Allreduce(MPI_IN_PLACE, range, 2, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  agree(mpi, [&] {
    auto said = [](long long it) { return it < 0 ? std::string("no checkpoint") : fmt::format("iteration {}", it); };
    OCC_CHECK(mpi.rank != 0 || range[0] == -range[1],
              "--load {}: the ranks find different checkpoints there ({} on one, {} on another); --load must name a "
              "folder that every node sees (a shared file system)",
              opt.load, said(-range[1]), said(range[0]));
  });
}

// Which ranks run on which host (collective). Rank 0 prints it, and warns when a
// TP group spans hosts: its per-layer all-reduces would then cross the slow links.
void report_placement(const MpiRuntime& mpi, int tp_size) {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(name, &len);
  std::vector<char> all(mpi.rank == 0 ? size_t(mpi.size) * MPI_MAX_PROCESSOR_NAME : 0);
  MPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (mpi.rank != 0) return;
  std::vector<std::string> host(static_cast<size_t>(mpi.size));
  for (int r = 0; r < mpi.size; ++r) host[size_t(r)] = std::string(&all[size_t(r) * MPI_MAX_PROCESSOR_NAME]);
  std::map<std::string, std::vector<int>> ranks_of;
  for (int r = 0; r < mpi.size; ++r) ranks_of[host[size_t(r)]].push_back(r);
  std::string line = fmt::format("placement: {} host{}:", ranks_of.size(), ranks_of.size() == 1 ? "" : "s");
  for (const auto& [h, ranks] : ranks_of) {
    line += fmt::format(" {} [", h);
    for (size_t i = 0; i < ranks.size(); ++i) line += fmt::format("{}{}", i ? "," : "", ranks[i]);
    line += "]";
  }
  std::printf("%s\n", line.c_str());
  for (int first = 0; first < mpi.size; first += tp_size)
    for (int r = first + 1; r < first + tp_size; ++r)
      if (host[size_t(r)] != host[size_t(first)]) {
        std::printf("warning: TP group of ranks %d-%d spans hosts (%s, %s): its all-reduces cross the network; "
                    "place %d consecutive ranks per host (e.g. mpirun --map-by slot with %d slots per host)\n",
                    first, first + tp_size - 1, host[size_t(first)].c_str(), host[size_t(r)].c_str(), tp_size,
                    tp_size);
        return;
      }
}
// The data's indices: built once per job into the cache (rank 0; then, for a cache
// folder that is not shared between nodes, the first rank of each other node),
// while the others wait; then every rank maps them. Each step is agreed, so a
// failure on the builder ends every rank with its message.
void build_data_indices(const MpiRuntime& mpi, Trainer& trainer) {
  auto build = [&] {
    for (const auto& line : trainer.build_data_indices()) std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };
  agree(mpi, [&] {
    if (mpi.rank == 0) build();
  });
  if (mpi.size > 1) {
    const NodeRanks node = node_ranks(MPI_COMM_WORLD);
    agree(mpi, [&] {
      if (node.local_rank == 0 && mpi.rank != 0) build();  // finds rank 0's indices on a shared folder
    });
  }
  agree(mpi, [&] { trainer.open_data(); });
}
}  // namespace

int train(int argc, char** argv) {
  CLI::App app{"Train a GPT model (Megatron flag names; --config FILE.json accepted). Launch with mpirun -np N for "
               "TP x PP x DP parallelism.",
               "train"};
  TrainOptions opt;
  add_train_command_flags(app, opt);
  // Set by `optimus-cc launch` for its own job: it holds --save's lock with this token.
  std::string run_lock_token;
  app.add_option("--run-lock-token", run_lock_token, "set by `optimus-cc launch` for its own job")->group("");
  // --exit-signal-handler first thing (train/exit_signals.h).
  if (exit_signal_handler_asked(argc, argv)) install_exit_signal_handlers();
  MpiRuntime mpi(argc, argv);
  choose_cuda_module_loading(mpi);
  // --heartbeat-dir: stopped after the trainer is gone (its threads may report).
  struct HeartbeatSession {
    ~HeartbeatSession() { heartbeat::stop(); }
  } heartbeat_session;
  RunLock run_lock;  // (released after the trainer's last save)
  std::unique_ptr<Trainer> trainer;
  // --save's lock on world rank 0 (train/run_lock.h): before anything is read from or
  // written there when the folder exists, else once the trainer has created it.
  const auto lock_run_folder = [&] {
    if (mpi.rank != 0 || opt.save.empty() || run_lock.held() || !std::filesystem::is_directory(opt.save)) return;
    try {
      run_lock = RunLock::acquire(opt.save, "optimus-cc train", run_lock_token);
    } catch (const Error& e) {
      throw Error(fmt::format("--save {}", e.what()));
    }
  };
  try {
    int rc = -1;
    agree(mpi, [&] {
      rc = parse_command_line(app, argc, argv);
      if (rc < 0) refuse_inapplicable_flags(app, opt);
      if (rc < 0 && !opt.heartbeat_dir.empty()) heartbeat::start(opt.heartbeat_dir, mpi.rank, mpi.size);
    });
    if (rc >= 0) return rc;
    start_emulated_latency(mpi, "train");
    if (mpi.size > 1) agree(mpi, [&] { check_ranks_agree(mpi, opt); });
    agree(mpi, lock_run_folder);
    agree(mpi, [&] {
      trainer = std::make_unique<Trainer>(opt, mpi.rank, mpi.size);
      lock_run_folder();
    });
    if (mpi.size > 1) check_same_resume(mpi, opt, *trainer);
    build_data_indices(mpi, *trainer);
    or_end_job(mpi, [&] { trainer->connect(opt.comm_timeout_s); });
    if (mpi.size > 1) report_placement(mpi, trainer->layout().tp_size);
    agree(mpi, [&] { trainer->load(); });
    or_end_job(mpi, [&] { trainer->announce_compression_state(); });
  } catch (const ReportedFailure&) {
    return 1;
  }
  // From here on a failure on one rank aborts the whole job.
  try {
    trainer->run();
  } catch (const AgreedError& e) {
    // Every rank stopped at the same point (a decision on all-reduced values):
    // one prints, all exit 1, no abort needed.
    heartbeat::fail(mpi.rank == e.reporter ? e.what() : "");
    if (mpi.size == 1) throw;
    if (mpi.rank == e.reporter) {
      std::fprintf(stderr, "error: %s\n", e.what());
      std::fflush(stderr);
    }
    return 1;
  } catch (const std::exception& e) {
    heartbeat::fail(failure_message(e));
    end_job(mpi, e);
  }
  trainer.reset();
  return 0;
}

}  // namespace occ::cmd
