#include "comm/nccl_communicator.h"

#include <fmt/format.h>

#include "comm/emulated_latency.h"
#include "comm/nccl_loader.h"
#include "comm/ring_volume.h"
#include "core/error.h"
#include "core/heartbeat.h"

#if defined(OCC_WITH_CUDA)
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <exception>
#include <optional>
#include <vector>

#include "core/timer.h"
#endif

namespace occ {

#if defined(OCC_WITH_CUDA)

namespace {

// As MpiCommunicator's waits: yield first, then sleep up to 200 us, so a rank
// waiting on the network leaves the core to one that computes.
void back_off(int polls) {
  if (polls < 32) {
    sched_yield();
    return;
  }
  timespec ts{0, std::min<long>(200'000, 2'000L * (polls - 31))};
  nanosleep(&ts, nullptr);
}

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// The lowest rank of `comm` for which ok is false, or -1 when it holds on all.
int first_failing_rank(MPI_Comm comm, bool ok) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  int mine = ok ? size : rank, lowest = size;
  // Set-up traffic, not training traffic: not counted (a group's counters are
  // the same whichever library it runs on).
  MPI_Allreduce(&mine, &lowest, 1, MPI_INT, MPI_MIN, comm);
  return lowest == size ? -1 : lowest;
}

// NCCL's last error message, "" when it has none.
std::string last_error(ncclComm_t comm) {
  const char* e = ncclGetLastError(comm);
  return e ? printable(e, 200) : std::string();
}

// Rank `root`'s text, on every rank of comm.
std::string broadcast_text(MPI_Comm comm, int root, const std::string& text) {
  char buf[512] = {};
  std::strncpy(buf, text.c_str(), sizeof(buf) - 1);
  MPI_Bcast(buf, sizeof(buf), MPI_CHAR, root, comm);
  return buf;
}

// NCCL's type for values of a format.
ncclDataType_t nccl_type(Precision p) {
  return p == Precision::Bf16 ? ncclBfloat16 : p == Precision::Fp16 ? ncclFloat16 : ncclFloat;
}

}  // namespace

std::string nccl_version(std::string* why) {
  if (!nccl_library_loaded(why)) return {};
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) {
    if (why) *why = "ncclGetVersion failed";
    return {};
  }
  return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100);
}

struct NcclCommunicator::Impl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  std::optional<DeviceMark> queued;  // the work the calling thread queued before an operation
  // Pipeline sends: an event after each queued one (oldest first), and spare events.
  std::deque<cudaEvent_t> sends_in_flight;
  std::vector<cudaEvent_t> spare_events;
  uint64_t sends_issued = 0, sends_finished = 0;
  double timeout_s = 60;
  std::string name;

  ~Impl() {
    if (comm) {
      // Finalize flushes outstanding work; a non-blocking communicator reports
      // ncclInProgress until it has. Give up (abort) after the timeout.
      ncclResult_t r = ncclCommFinalize(comm);
      const double start = now_seconds();
      for (int polls = 0; r == ncclInProgress && now_seconds() - start < timeout_s; ++polls) {
        back_off(polls);
        ncclCommGetAsyncError(comm, &r);
      }
      if (r == ncclSuccess)
        ncclCommDestroy(comm);
      else
        ncclCommAbort(comm);
    }
    for (cudaEvent_t e : sends_in_flight) cudaEventDestroy(e);
    for (cudaEvent_t e : spare_events) cudaEventDestroy(e);
    if (stream) cudaStreamDestroy(stream);
  }

  [[noreturn]] void die(const std::string& what, ncclResult_t r) {
    abort_job(fmt::format("rank {}: NCCL {} failed in the {} group: {} ({}); check the GPUs and the network, or run "
                          "with --comm-backend mpi",
                          world_rank(), what, name, ncclGetErrorString(r), last_error(comm)));
  }

  // Ends the job from here: MPI_Abort takes every rank, its CUDA context and
  // NCCL with it. (Not ncclCommAbort first: it frees device memory, which can
  // wait behind the other group's kernel still spinning on this GPU, and the
  // message would never be printed.)
  [[noreturn]] void timed_out(const std::string& what) {
    abort_job(fmt::format("rank {} waited more than {:g} s for NCCL {} ({} group); a peer rank has probably failed "
                          "or stalled (raise --comm-timeout if this is legitimate)",
                          world_rank(), timeout_s, what, name));
  }

  // A non-blocking call may return ncclInProgress: poll until it has settled.
  void settle(ncclResult_t r, const std::string& what) {
    const double start = now_seconds();
    for (int polls = 0; r == ncclInProgress; ++polls) {
      back_off(polls);
      ncclCommGetAsyncError(comm, &r);
      if ((polls & 63) == 0 && now_seconds() - start > timeout_s) timed_out(what);
    }
    if (r != ncclSuccess) die(what, r);
  }

  // The group's stream waits for what the calling thread queued on the legacy
  // stream (the kernels that wrote the operands).
  void after_queued_work() {
    queued->record();
    cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(queued->handle()), 0);
  }

  // Until the stream has finished the operation, watching for NCCL errors and the timeout.
  void wait(const std::string& what) {
    const double start = now_seconds();
    heartbeat::begin_wait(what.c_str(), name, -1);
    for (int polls = 0;; ++polls) {
      const cudaError_t e = cudaStreamQuery(stream);
      if (e == cudaSuccess) {
        heartbeat::end_wait();
        return;
      }
      if (e != cudaErrorNotReady)
        abort_job(fmt::format("rank {}: CUDA error during NCCL {} ({} group): {}", world_rank(), what, name,
                              cudaGetErrorString(e)));
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm, &async);
      if (async != ncclSuccess && async != ncclInProgress) die(what, async);
      back_off(polls);
      if ((polls & 63) == 0 && now_seconds() - start > timeout_s) timed_out(what);
    }
  }

  // ready: wait for the work before this mark only (a gradient bucket's
  // kernels), not for what the compute thread has queued since.
  template <class Enqueue>
  void enqueue(const std::string& what, Enqueue ops, const DeviceMark* ready = nullptr) {
    if (ready && ready->handle())
      cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(ready->handle()), 0);
    else
      after_queued_work();
    settle(ncclGroupStart(), what);
    ops();
    settle(ncclGroupEnd(), what);
  }
  template <class Enqueue>
  void run(const std::string& what, Enqueue ops, const DeviceMark* ready = nullptr) {
    enqueue(what, ops, ready);
    wait(what);
  }
};

NcclCommunicator::NcclCommunicator(std::unique_ptr<Impl> impl, TrafficCounters& counters, std::string name, int rank,
                                   int size)
    : impl_(std::move(impl)), counters_(counters), name_(std::move(name)), rank_(rank), size_(size) {}

NcclCommunicator::~NcclCommunicator() = default;

std::unique_ptr<NcclCommunicator> NcclCommunicator::create(MpiCommunicator& group, double timeout_s,
                                                           std::string* why) {
  const MPI_Comm mpi = group.handle();
  auto agreed = [&](bool ok, const std::string& reason) {
    const int failing = first_failing_rank(mpi, ok);
    if (failing < 0) return true;
    const std::string text = broadcast_text(mpi, failing, reason);
    if (why) *why = failing == group.rank() ? text : fmt::format("on rank {} of the {} group: {}", failing, group.name(), text);
    return false;
  };
  std::string reason;
  if (!agreed(nccl_library_loaded(&reason), reason)) return nullptr;
  // NCCL moves its messages itself: the emulated latency is added by the MPI transport only.
  if (!agreed(emulated_latency().count() == 0,
              fmt::format("{} is set, and the emulated latency is added by the MPI transport only",
                          kEmulatedLatencyVariable)))
    return nullptr;

  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  ncclResult_t r = ncclSuccess;
  if (group.rank() == 0) r = ncclGetUniqueId(&id);
  if (!agreed(r == ncclSuccess, fmt::format("ncclGetUniqueId: {}", ncclGetErrorString(r)))) return nullptr;
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, mpi);

  auto impl = std::make_unique<Impl>();
  impl->timeout_s = timeout_s;
  impl->name = group.name();
  const cudaError_t ce = cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking);
  std::string stream_error = ce == cudaSuccess ? "" : fmt::format("cudaStreamCreate: {}", cudaGetErrorString(ce));
  if (ce == cudaSuccess) {
    try {
      impl->queued.emplace(Device::Cuda);
    } catch (const std::exception& e) {  // every rank must reach the agreement below
      stream_error = e.what();
    }
  }
  if (!agreed(stream_error.empty(), stream_error)) return nullptr;

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every wait polls: --comm-timeout can abort it
  r = ncclCommInitRankConfig(&impl->comm, group.size(), id, group.rank(), &config);
  const double start = now_seconds();
  bool late = false;
  for (int polls = 0; r == ncclInProgress && impl->comm; ++polls) {
    back_off(polls);
    ncclCommGetAsyncError(impl->comm, &r);
    if (r == ncclInProgress && now_seconds() - start > timeout_s) {
      late = true;
      break;
    }
  }
  const bool ok = r == ncclSuccess && impl->comm;
  if (!ok) {
    reason = late ? fmt::format("ncclCommInitRankConfig did not finish within --comm-timeout {:g} s", timeout_s)
                  : fmt::format("ncclCommInitRankConfig: {} ({})", ncclGetErrorString(r),
                                last_error(impl->comm));
  }
  if (!agreed(ok, reason)) {
    if (impl->comm) ncclCommAbort(impl->comm);
    impl->comm = nullptr;
    return nullptr;
  }
  return std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(std::move(impl), group.counters(), group.name(), group.rank(), group.size()));
}

void NcclCommunicator::allreduce_sum(TensorRef data, size_t count, Traffic traffic) {
  if (count == 0) return;
  const ncclDataType_t type = nccl_type(data.format());
  impl_->run("all-reduce", [&] {
    impl_->settle(ncclAllReduce(data.data(), data.data(), count, type, ncclSum, impl_->comm, impl_->stream), "all-reduce");
  });
  counters_.add(traffic, ring_allreduce_bytes(count, size_, rank_, element_bytes(data.format())));
}

void NcclCommunicator::allreduce_max(float* data, size_t count, Traffic traffic) {
  if (count == 0) return;
  impl_->run("all-reduce (max)", [&] { impl_->settle(ncclAllReduce(data, data, count, ncclFloat, ncclMax, impl_->comm, impl_->stream), "all-reduce (max)"); });
  counters_.add(traffic, ring_allreduce_bytes(count, size_, rank_, sizeof(float)));
}

void NcclCommunicator::allreduce_mean(TensorRef data, size_t count, Traffic traffic, const DeviceMark* ready) {
  if (count == 0) return;
  const ncclDataType_t type = nccl_type(data.format());
  impl_->run("all-reduce (mean)", [&] {
    impl_->settle(ncclAllReduce(data.data(), data.data(), count, type, ncclAvg, impl_->comm, impl_->stream),
                  "all-reduce (mean)");
  }, ready);
  counters_.add(traffic, ring_allreduce_bytes(count, size_, rank_, element_bytes(data.format())));
}

void NcclCommunicator::allgather(ConstTensorRef in, TensorRef out, size_t count, Traffic traffic) {
  if (count == 0) return;
  check_same_format(in, out, "all-gather");
  const ncclDataType_t type = nccl_type(in.format());
  impl_->run("all-gather", [&] {
    impl_->settle(ncclAllGather(in.data(), out.data(), count, type, impl_->comm, impl_->stream), "all-gather");
  });
  counters_.add(traffic, ring_allgather_bytes(count, size_, element_bytes(in.format())));
}

void NcclCommunicator::reduce_scatter(ConstTensorRef in, TensorRef out, size_t count, Traffic traffic) {
  if (count == 0) return;
  check_same_format(in, out, "reduce-scatter");
  const ncclDataType_t type = nccl_type(in.format());
  // One reduce per block to its rank (the loader resolves ncclReduce, as reduce_scatter_mean uses it);
  // counted as the ring reduce-scatter NCCL's own would move.
  impl_->run("reduce-scatter", [&] {
    for (int b = 0; b < size_; ++b)
      impl_->settle(ncclReduce((in + int64_t(count) * b).data(), out.data(), count, type, ncclSum, b, impl_->comm,
                               impl_->stream),
                    "reduce-scatter");
  });
  counters_.add(traffic, ring_reduce_scatter_bytes(count * size_t(size_), size_, rank_, element_bytes(in.format())));
}

void NcclCommunicator::reduce_scatter_mean(TensorRef data, size_t count, Traffic traffic, const DeviceMark* ready) {
  if (count == 0) return;
  const ncclDataType_t type = nccl_type(data.format());
  // One reduce per ring chunk to the rank that owns it (rank r owns chunk
  // r + 1): NCCL's own reduce-scatter needs equal chunks, the MPI ring's are not.
  impl_->run("reduce-scatter", [&] {
    for (int c = 0; c < size_; ++c) {
      const RingChunk ch = ring_chunk(count, size_, c);
      if (ch.len == 0) continue;
      const int owner = (c - 1 + size_) % size_;
      void* chunk = (data + int64_t(ch.lo)).data();
      impl_->settle(ncclReduce(chunk, chunk, ch.len, type, ncclAvg, owner, impl_->comm, impl_->stream),
                    "reduce-scatter");
    }
  }, ready);
  counters_.add(traffic, ring_reduce_scatter_bytes(count, size_, rank_, element_bytes(data.format())));
}

void NcclCommunicator::sendrecv(const void* send, size_t send_bytes, int to, void* recv, size_t recv_bytes, int from,
                                Traffic traffic) {
  impl_->run("send/receive", [&] {
    if (send_bytes) impl_->settle(ncclSend(send, send_bytes, ncclUint8, to, impl_->comm, impl_->stream), "send");
    if (recv_bytes) impl_->settle(ncclRecv(recv, recv_bytes, ncclUint8, from, impl_->comm, impl_->stream), "receive");
  });
  counters_.add(traffic, send_bytes);
}

uint64_t NcclCommunicator::send_async(const void* data, size_t bytes, int to, Traffic traffic) {
  if (bytes > 0) {
    impl_->enqueue("send", [&] { impl_->settle(ncclSend(data, bytes, ncclUint8, to, impl_->comm, impl_->stream), "send"); });
    counters_.add(traffic, bytes);
  }
  // Every send gets its event, so the numbers stay in step with the events.
  cudaEvent_t done = nullptr;
  if (!impl_->spare_events.empty()) {
    done = impl_->spare_events.back();
    impl_->spare_events.pop_back();
  } else if (const cudaError_t e = cudaEventCreateWithFlags(&done, cudaEventDisableTiming); e != cudaSuccess) {
    abort_job(fmt::format("rank {}: cudaEventCreate for an NCCL send ({} group): {}", world_rank(), name_,
                          cudaGetErrorString(e)));
  }
  cudaEventRecord(done, impl_->stream);
  impl_->sends_in_flight.push_back(done);
  return impl_->sends_issued++;
}

uint64_t NcclCommunicator::sends_done() {
  auto& in_flight = impl_->sends_in_flight;
  while (!in_flight.empty() && cudaEventQuery(in_flight.front()) == cudaSuccess) {
    impl_->spare_events.push_back(in_flight.front());
    in_flight.pop_front();
    ++impl_->sends_finished;
  }
  return impl_->sends_finished;
}

void NcclCommunicator::wait_sends() {
  impl_->wait("send");
  sends_done();
}

void NcclCommunicator::recv(void* data, size_t bytes, int from) {
  if (bytes == 0) return;
  impl_->run("receive", [&] { impl_->settle(ncclRecv(data, bytes, ncclUint8, from, impl_->comm, impl_->stream), "receive"); });
}

#else  // no CUDA backend: NCCL never forms, and the methods are unreachable

std::string nccl_version(std::string* why) {
  nccl_library_loaded(why);
  return {};
}

struct NcclCommunicator::Impl {};

NcclCommunicator::NcclCommunicator(std::unique_ptr<Impl> impl, TrafficCounters& counters, std::string name, int rank,
                                   int size)
    : impl_(std::move(impl)), counters_(counters), name_(std::move(name)), rank_(rank), size_(size) {}

NcclCommunicator::~NcclCommunicator() = default;

std::unique_ptr<NcclCommunicator> NcclCommunicator::create(MpiCommunicator&, double, std::string* why) {
  nccl_library_loaded(why);
  return nullptr;
}

void NcclCommunicator::allreduce_sum(TensorRef, size_t, Traffic) { fail("internal: NCCL in a build without CUDA"); }
void NcclCommunicator::allreduce_max(float*, size_t, Traffic) { fail("internal: NCCL in a build without CUDA"); }
void NcclCommunicator::allreduce_mean(TensorRef, size_t, Traffic, const DeviceMark*) { fail("internal: NCCL in a build without CUDA"); }
void NcclCommunicator::allgather(ConstTensorRef, TensorRef, size_t, Traffic) { fail("internal: NCCL in a build without CUDA"); }
void NcclCommunicator::reduce_scatter(ConstTensorRef, TensorRef, size_t, Traffic) { fail("internal: NCCL in a build without CUDA"); }
void NcclCommunicator::reduce_scatter_mean(TensorRef, size_t, Traffic, const DeviceMark*) { fail("internal: NCCL in a build without CUDA"); }
void NcclCommunicator::sendrecv(const void*, size_t, int, void*, size_t, int, Traffic) {
  fail("internal: NCCL in a build without CUDA");
}
uint64_t NcclCommunicator::send_async(const void*, size_t, int, Traffic) { fail("internal: NCCL in a build without CUDA"); }
uint64_t NcclCommunicator::sends_done() { fail("internal: NCCL in a build without CUDA"); }
void NcclCommunicator::wait_sends() { fail("internal: NCCL in a build without CUDA"); }
void NcclCommunicator::recv(void*, size_t, int) { fail("internal: NCCL in a build without CUDA"); }

#endif

}  // namespace occ
