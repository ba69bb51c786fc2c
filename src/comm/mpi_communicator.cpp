#include "comm/mpi_communicator.h"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>

#include "comm/emulated_latency.h"

#include "core/error.h"
#include "core/heartbeat.h"
#include "core/timer.h"

namespace occ {

void abort_job(const std::string& message) {
  heartbeat::fail(message);
  std::fprintf(stderr, "error: %s\n", message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

namespace {

// MPI counts are ints: one message over 2 GiB would wrap to a negative count.
// Every rank of an exchange computes the same sizes, so all of them throw.
int message_bytes(size_t bytes, const char* what) {
  OCC_CHECK(bytes <= size_t(0x7fffffff),
            "{}: one message of {:.2f} GiB exceeds MPI's 2 GiB limit per call; use a smaller --micro-batch-size "
            "or --dp-bucket-size, or more tensor parallelism",
            what, double(bytes) / double(1ull << 30));
  return int(bytes);
}

// A 16-bit sum step: both operands widened, added in fp32, rounded to the format.
struct SixteenBitSum {
  Precision format;
  uint16_t operator()(uint16_t a, uint16_t b) const {
    return sixteen_bits(format, sixteen_value(format, a) + sixteen_value(format, b));
  }
};

uint16_t* sixteen_bit_values(TensorRef x) { return static_cast<uint16_t*>(x.data()); }

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, TrafficCounters& counters, double timeout_s, std::string name)
    : comm_(comm), counters_(counters), timeout_s_(timeout_s), name_(std::move(name)) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  // The world rank of each member, for the heartbeat's "waits for rank R".
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  MPI_Comm_group(comm_, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> mine(size_t(size_), 0);
  for (int r = 0; r < size_; ++r) mine[size_t(r)] = r;
  world_ranks_.assign(size_t(size_), -1);
  MPI_Group_translate_ranks(group, size_, mine.data(), world, world_ranks_.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  if (emulated_latency().count() > 0) {
    std::vector<char> remote(size_t(size_), 0);
    bool any = false;
    for (int r = 0; r < size_; ++r)
      any |= (remote[size_t(r)] = on_different_nodes(world_ranks_[size_t(rank_)], world_ranks_[size_t(r)])) != 0;
    if (any) delayed_peer_ = std::move(remote);
  }
}

MpiCommunicator::~MpiCommunicator() {
  if (comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiCommunicator::wait_requests(MPI_Request* reqs, int n, const char* what, int peer, MPI_Status* statuses) {
  const double start = now_seconds();
  heartbeat::begin_wait(what, name_, peer >= 0 && peer < size_ ? world_ranks_[size_t(peer)] : -1);
  for (int polls = 0;; ++polls) {
    int done = 0;
    MPI_Testall(n, reqs, &done, statuses ? statuses : MPI_STATUSES_IGNORE);
    if (done) {
      heartbeat::end_wait();
      return;
    }
    if (polls < 32) {
      sched_yield();
    } else {
      // Back off up to 200 us: cheap next to a layer's compute, and the core
      // goes to a rank that has work.
      const long ns = std::min<long>(200'000, 2'000L * (polls - 31));
      timespec ts{0, ns};
      nanosleep(&ts, nullptr);
      if ((polls & 63) == 0 && now_seconds() - start > timeout_s_) {
        int world_rank = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
        abort_job(fmt::format("rank {} waited more than {:g} s for {} ({} group, peer {}); a peer rank has "
                              "probably failed or stalled (raise --comm-timeout if this is legitimate)",
                              world_rank, timeout_s_, what, name_, peer));
      }
    }
  }
}

std::shared_ptr<MpiCommunicator::DelayedSend> MpiCommunicator::send_later(const void* data, int bytes, int peer,
                                                                          int tag) {
  auto d = std::make_shared<DelayedSend>();
  const MPI_Comm comm = comm_;
  d->due = emulated_latency_line().schedule_after(emulated_latency(), [d, data, bytes, peer, tag, comm] {
    MPI_Isend(data, bytes, MPI_BYTE, peer, tag, comm, &d->handle);
    d->posted.store(true, std::memory_order_release);
  });
  return d;
}

void MpiCommunicator::await_posted(Request& r) {
  if (!r.delayed) return;
  std::this_thread::sleep_until(r.delayed->due);
  while (!r.delayed->posted.load(std::memory_order_acquire)) {
    timespec ts{0, 20'000};
    nanosleep(&ts, nullptr);
  }
  r.handle = r.delayed->handle;
  r.delayed.reset();
}

void MpiCommunicator::exchange(void* recv_buf, size_t recv_bytes, int left, const void* send_buf, size_t send_bytes,
                               int right, int tag, const char* what) {
  MPI_Request reqs[2];
  MPI_Irecv(recv_buf, message_bytes(recv_bytes, what), MPI_BYTE, left, tag, comm_, &reqs[0]);
  if (!delayed_to(right)) {
    MPI_Isend(send_buf, message_bytes(send_bytes, what), MPI_BYTE, right, tag, comm_, &reqs[1]);
  } else {
    Request send{MPI_REQUEST_NULL, right, what, send_later(send_buf, message_bytes(send_bytes, what), right, tag)};
    await_posted(send);
    reqs[1] = send.handle;
  }
  wait_requests(reqs, 2, what, left);
}

void MpiCommunicator::wait(Request& r) {
  await_posted(r);
  wait_requests(&r.handle, 1, r.what, r.peer);
}

size_t MpiCommunicator::wait_received(Request& r) {
  MPI_Status status;
  wait_requests(&r.handle, 1, r.what, r.peer, &status);
  MPI_Count bytes = 0;
  MPI_Get_elements_x(&status, MPI_BYTE, &bytes);
  return size_t(bytes);
}

bool MpiCommunicator::test(Request& r) {
  if (r.delayed) {
    if (!r.delayed->posted.load(std::memory_order_acquire)) return false;
    await_posted(r);
  }
  int done = 0;
  MPI_Test(&r.handle, &done, MPI_STATUS_IGNORE);
  return done != 0;
}

void MpiCommunicator::wait_all(std::vector<Request>& rs) {
  for (auto& r : rs) wait(r);
}

MpiCommunicator::Request MpiCommunicator::isend(const void* data, size_t bytes, int peer, int tag, Traffic traffic,
                                                const char* what) {
  Request r{MPI_REQUEST_NULL, peer, what, nullptr};
  if (delayed_to(peer))
    r.delayed = send_later(data, message_bytes(bytes, what), peer, tag);
  else
    MPI_Isend(data, message_bytes(bytes, what), MPI_BYTE, peer, tag, comm_, &r.handle);
  counters_.add(traffic, bytes);
  return r;
}

MpiCommunicator::Request MpiCommunicator::irecv(void* data, size_t bytes, int peer, int tag, const char* what) {
  Request r{MPI_REQUEST_NULL, peer, what, nullptr};
  MPI_Irecv(data, message_bytes(bytes, what), MPI_BYTE, peer, tag, comm_, &r.handle);
  return r;
}

// Ring all-reduce = ring reduce-scatter + ring all-gather over `size` chunks
// (chunk c = elements [count * c / size, count * (c + 1) / size)). After the
// reduce-scatter, rank r holds the whole sum of chunk (r + 1) % size: its
// owned_chunk(), which the distributed optimizer updates. Each chunk's sum is
// computed once and then copied, so every rank ends with bit-identical results
// (replicated parameters stay consistent), and the two halves run alone give
// exactly the all-reduce's values.
template <class T, class Op>
void MpiCommunicator::ring_reduce_scatter(T* data, size_t count, Traffic traffic, Op op) {
  const int n = size_;
  if (n == 1 || count == 0) return;
  const int right = (rank_ + 1) % n, left = (rank_ - 1 + n) % n;
  scratch_.resize((count / size_t(n) + 1) * sizeof(T));
  T* tmp = reinterpret_cast<T*>(scratch_.data());
  constexpr int kTag = 7001;
  for (int s = 0; s < n - 1; ++s) {
    const Chunk send = chunk(count, n, ((rank_ - s) % n + n) % n), recv = chunk(count, n, ((rank_ - s - 1) % n + n) % n);
    counters_.add(traffic, send.len * sizeof(T));
    exchange(tmp, recv.len * sizeof(T), left, data + send.lo, send.len * sizeof(T), right, kTag, "a reduce-scatter step");
    T* dst = data + recv.lo;
    for (size_t i = 0; i < recv.len; ++i) dst[i] = op(dst[i], tmp[i]);
  }
}

template <class T>
void MpiCommunicator::ring_allgather_chunks(T* data, size_t count, Traffic traffic) {
  const int n = size_;
  if (n == 1 || count == 0) return;
  const int right = (rank_ + 1) % n, left = (rank_ - 1 + n) % n;
  constexpr int kTag = 7001;
  for (int s = 0; s < n - 1; ++s) {
    const Chunk send = chunk(count, n, ((rank_ + 1 - s) % n + n) % n), recv = chunk(count, n, ((rank_ - s) % n + n) % n);
    counters_.add(traffic, send.len * sizeof(T));
    exchange(data + recv.lo, recv.len * sizeof(T), left, data + send.lo, send.len * sizeof(T), right, kTag,
             "an all-gather step");
  }
}

template <class T, class Op>
void MpiCommunicator::ring_allreduce(T* data, size_t count, Traffic traffic, Op op) {
  ring_reduce_scatter(data, count, traffic, op);
  ring_allgather_chunks(data, count, traffic);
}

void MpiCommunicator::reduce_scatter_sum(TensorRef data, size_t count, Traffic traffic) {
  if (data.is_fp32())
    ring_reduce_scatter(data.f32(), count, traffic, [](float a, float b) { return a + b; });
  else
    ring_reduce_scatter(sixteen_bit_values(data), count, traffic, SixteenBitSum{data.format()});
}

void MpiCommunicator::allgather_chunks(TensorRef data, size_t count, Traffic traffic) {
  if (data.is_fp32())
    ring_allgather_chunks(data.f32(), count, traffic);
  else
    ring_allgather_chunks(sixteen_bit_values(data), count, traffic);
}

void MpiCommunicator::allreduce_sum(TensorRef data, size_t count, Traffic traffic) {
  if (data.is_fp32())
    ring_allreduce(data.f32(), count, traffic, [](float a, float b) { return a + b; });
  else
    ring_allreduce(sixteen_bit_values(data), count, traffic, SixteenBitSum{data.format()});
}

void MpiCommunicator::allreduce_max(float* data, size_t count, Traffic traffic) {
  ring_allreduce(data, count, traffic, [](float a, float b) { return a > b ? a : b; });
}

void MpiCommunicator::allreduce_sum(double* data, size_t count, Traffic traffic) {
  ring_allreduce(data, count, traffic, [](double a, double b) { return a + b; });
}

void MpiCommunicator::allgather(ConstTensorRef in, TensorRef out, size_t count, Traffic traffic) {
  check_same_format(in, out, "all-gather");
  const int n = size_;
  const size_t block = count * element_bytes(in.format());
  char* o = static_cast<char*>(out.data());
  if (o + size_t(rank_) * block != in.data()) std::memcpy(o + size_t(rank_) * block, in.data(), block);
  if (n == 1) return;
  const int right = (rank_ + 1) % n, left = (rank_ - 1 + n) % n;
  constexpr int kTag = 7002;
  for (int s = 0; s < n - 1; ++s) {
    const int send_c = ((rank_ - s) % n + n) % n, recv_c = ((rank_ - s - 1) % n + n) % n;
    counters_.add(traffic, block);
    exchange(o + size_t(recv_c) * block, block, left, o + size_t(send_c) * block, block, right, kTag, "an all-gather step");
  }
}

void MpiCommunicator::reduce_scatter(ConstTensorRef in, TensorRef out, size_t count, Traffic traffic) {
  check_same_format(in, out, "reduce-scatter");
  const int n = size_;
  const size_t block = count * element_bytes(in.format());
  if (n == 1) {
    if (in.data() != out.data()) std::memcpy(out.data(), in.data(), block);
    return;
  }
  // The ring leaves rank r the whole sum of chunk (r + 1) % n: block b of `in`
  // goes to chunk (b + 1) % n, so that the sum a rank ends with is its own block.
  reduce_scatter_copy_.resize(size_t(n) * block);
  const char* src = static_cast<const char*>(in.data());
  for (int b = 0; b < n; ++b)
    std::memcpy(reduce_scatter_copy_.data() + size_t((b + 1) % n) * block, src + size_t(b) * block, block);
  reduce_scatter_sum(TensorRef(reduce_scatter_copy_.data(), in.format()), size_t(n) * count, traffic);
  std::memcpy(out.data(), reduce_scatter_copy_.data() + size_t((rank_ + 1) % n) * block, block);
}

void MpiCommunicator::barrier() {
  double token = 0.0;
  allreduce_sum(&token, 1, Traffic::Other);
}

}  // namespace occ
