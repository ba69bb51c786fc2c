#pragma once
// MPI for the lifetime of a command, and agreement on set-up failures: the
// pieces every multi-rank command (train, comm-check) starts with.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <string>

#include <fmt/format.h>

#include "comm/comm_backend.h"
#include "comm/emulated_latency.h"
#include "comm/mpi_communicator.h"
#include "comm/node_ranks.h"
#include "core/cuda_module_loading.h"
#include "core/error.h"
#include "core/heartbeat.h"

namespace occ::cmd {

// Works under mpirun and as a singleton.
struct MpiRuntime {
  MpiRuntime(int& argc, char**& argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    OCC_CHECK(provided >= MPI_THREAD_MULTIPLE, "this MPI library does not support MPI_THREAD_MULTIPLE");
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
  ~MpiRuntime() {
    stop_emulated_latency();  // every delayed message handed to MPI first
    MPI_Finalize();
  }
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;
  int rank = 0, size = 1;
};

// Collective; before any CUDA call. A multi-rank job that will probably run
// over NCCL (every rank of each node on a GPU of its own, as --comm-backend
// auto would find) has CUDA load its kernels eagerly (core/cuda_module_loading.h:
// lazily loaded kernels can stall ranks whose NCCL transfers are queued).
// The GPUs are told apart without CUDA, from CUDA_VISIBLE_DEVICES or the
// driver's list; the job's `cuda modules:` line reports what CUDA really did.
inline void choose_cuda_module_loading(const MpiRuntime& mpi) {
  if (mpi.size == 1) return;
  const NodeRanks node = node_ranks(MPI_COMM_WORLD);
  const std::string gpu = gpu_name_before_cuda(node.local_rank, std::getenv("CUDA_VISIBLE_DEVICES"), driver_gpu_count());
  const int gpus = gpus_in_use_on_node(MPI_COMM_WORLD, gpu);
  if (choose_comm_backend(CommBackend::Auto, Device::Cuda, mpi.size, node.local_size, gpus).backend == CommBackend::Nccl)
    prefer_eager_cuda_modules();
}

// Thrown after a failure has been reported once for the whole job.
struct ReportedFailure {};

// What a failed step says: an occ::Error's own line; anything else (a host
// allocation that failed, a library's exception) named as such.
inline std::string failure_message(const std::exception& e) {
  if (dynamic_cast<const Error*>(&e)) return e.what();
  if (dynamic_cast<const std::bad_alloc*>(&e))
    return "out of host memory (std::bad_alloc); use a smaller model or --micro-batch-size, or fewer ranks per machine";
  return fmt::format("internal: {}", e.what());
}

// Runs a step on every rank, then agrees: if any rank failed, the lowest
// failing rank prints its message (once for the job) and every rank throws
// ReportedFailure. Only local work may run inside `step` (no collectives), so
// a failing rank cannot leave the others waiting.
template <class F>
void agree(const MpiRuntime& mpi, F&& step) {
  std::string error;
  try {
    step();
  } catch (const std::exception& e) {
    error = failure_message(e);
  }
  int first_failed = error.empty() ? mpi.size : mpi.rank;
  MPI_Allreduce(MPI_IN_PLACE, &first_failed, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first_failed == mpi.size) return;
  heartbeat::fail(mpi.rank == first_failed ? error : std::string());  // for `optimus-cc launch`
  if (mpi.rank == first_failed) {
    std::fprintf(stderr, "error: %s%s\n", error.c_str(), mpi.size > 1 ? fmt::format(" (rank {})", mpi.rank).c_str() : "");
    std::fflush(stderr);
  }
  throw ReportedFailure{};
}

// Collective, before any communicator forms: the latency emulated between
// nodes (OCC_EMULATED_LATENCY, which scripts/cluster.sh run --latency exports
// where the kernel has no netem; comm/emulated_latency.h). Rank 0 says what
// it does. A value that is not a time fails on every rank (ReportedFailure).
inline void start_emulated_latency(const MpiRuntime& mpi, const char* command) {
  std::chrono::nanoseconds delay{0};
  agree(mpi, [&] { delay = emulated_latency_from_env(); });
  if (delay.count() == 0 || mpi.size == 1) return;
  const int nodes = configure_emulated_latency(MPI_COMM_WORLD, delay);
  if (mpi.rank != 0) return;
  if (nodes > 1)
    std::printf("%s: emulated latency %s one way on every message between nodes (%d nodes), added by the MPI "
                "transport (%s)\n",
                command, latency_text(delay).c_str(), nodes, kEmulatedLatencyVariable);
  else
    std::printf("%s: %s=%s, but every rank is on one node: no message is delayed\n", command,
                kEmulatedLatencyVariable, std::getenv(kEmulatedLatencyVariable));
  std::fflush(stdout);
}

// From inside a catch block: a failure one rank met alone ends the whole job
// with its message (the other ranks would wait for it in their next
// collective, and this rank in MPI_Finalize, its message unprinted). A single
// process rethrows it, for main to print.
[[noreturn]] inline void end_job(const MpiRuntime& mpi, const std::exception& e) {
  if (mpi.size == 1) throw;
  abort_job(fmt::format("{} (rank {})", failure_message(e), mpi.rank));
}

// Runs a step with collectives inside, which agree() cannot wrap: a failure
// ends the job (end_job).
template <class F>
void or_end_job(const MpiRuntime& mpi, F&& step) {
  try {
    step();
  } catch (const std::exception& e) {
    end_job(mpi, e);
  }
}

}  // namespace occ::cmd
