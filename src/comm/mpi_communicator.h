#pragma once
// A process group over MPI. Collectives are our own ring algorithms on
// nonblocking point-to-point messages, so the bytes each rank puts on the
// wire are known exactly (and counted per traffic class). Every wait polls
// with back-off sleeps instead of spinning, so ranks waiting on the network
// leave the cores to ranks that compute, and gives up after a timeout.
// With an emulated latency (comm/emulated_latency.h), every message to a rank
// of another node, the rings' steps included, is handed to MPI no earlier than
// its send time + the latency; with none, the path is the plain one.
#include <mpi.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/delay_line.h"
#include "comm/ring_volume.h"

namespace occ {

// Prints "error: <message>" and aborts every rank of the job.
[[noreturn]] void abort_job(const std::string& message);

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of comm (freed on destruction) unless it is MPI_COMM_WORLD.
  MpiCommunicator(MPI_Comm comm, TrafficCounters& counters, double timeout_s, std::string name);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allreduce_sum(TensorRef data, size_t count, Traffic traffic) override;
  void allreduce_max(float* data, size_t count, Traffic traffic) override;
  void allgather(ConstTensorRef in, TensorRef out, size_t count, Traffic traffic) override;
  // The ring reduce-scatter on a rotated copy of `in`: (size - 1) * count values leave each rank.
  void reduce_scatter(ConstTensorRef in, TensorRef out, size_t count, Traffic traffic) override;
  void allreduce_sum(double* data, size_t count, Traffic traffic);  // small control values

  // The two halves of allreduce_sum, for the distributed optimizer: after
  // reduce_scatter_sum, this rank's owned_chunk(count) of data holds the sum
  // over the group (other chunks: partial sums); allgather_chunks then copies
  // every rank's owned chunk to all. Together they equal allreduce_sum bit for
  // bit, and each moves (size - 1) / size of the data per rank, in data's
  // format (communicator.h: a 16-bit sum is reduced in the format).
  // (comm/ring_volume.h: which chunks, and the bytes the rings send.)
  using Chunk = RingChunk;
  static Chunk chunk(size_t count, int size, int c) { return ring_chunk(count, size, c); }
  Chunk owned_chunk(size_t count) const { return ring_owned_chunk(count, size_, rank_); }
  void reduce_scatter_sum(TensorRef data, size_t count, Traffic traffic);
  void allgather_chunks(TensorRef data, size_t count, Traffic traffic);
  void barrier();

  // A send held back by the emulated latency: the delay line's thread posts
  // it to MPI (handle) at `due`, then sets `posted`.
  struct DelayedSend {
    std::atomic<bool> posted{false};
    MPI_Request handle = MPI_REQUEST_NULL;
    DelayLine::Clock::time_point due{};
  };
  // Point to point (peer = rank in this group). Start, then wait().
  struct Request {
    MPI_Request handle = MPI_REQUEST_NULL;
    int peer = -1;
    const char* what = "";
    std::shared_ptr<DelayedSend> delayed;  // a send not yet handed to MPI (handle unset)
  };
  Request isend(const void* data, size_t bytes, int peer, int tag, Traffic traffic, const char* what);
  Request irecv(void* data, size_t bytes, int peer, int tag, const char* what);
  void wait(Request& r);
  // Waits for a receive started by irecv; returns the bytes that arrived
  // (fewer than asked for when the sender sent a shorter message).
  size_t wait_received(Request& r);
  // Is r done (its buffer free again)? Never waits.
  bool test(Request& r);
  void wait_all(std::vector<Request>& rs);

  MPI_Comm handle() const { return comm_; }
  const std::string& name() const { return name_; }
  TrafficCounters& counters() { return counters_; }

 private:
  template <class T, class Op>
  void ring_allreduce(T* data, size_t count, Traffic traffic, Op op);
  template <class T, class Op>
  void ring_reduce_scatter(T* data, size_t count, Traffic traffic, Op op);
  template <class T>
  void ring_allgather_chunks(T* data, size_t count, Traffic traffic);
  void wait_requests(MPI_Request* reqs, int n, const char* what, int peer, MPI_Status* statuses = nullptr);
  // Does a message to `peer` wait the emulated latency (a rank of another node)?
  bool delayed_to(int peer) const { return !delayed_peer_.empty() && delayed_peer_[size_t(peer)]; }
  // MPI_Isend of `bytes` to `peer` once the emulated latency has passed.
  std::shared_ptr<DelayedSend> send_later(const void* data, int bytes, int peer, int tag);
  // Until r's delayed send is handed to MPI (then r.handle is its request).
  void await_posted(Request& r);
  // One ring step: receive from `left` into recv_buf while sending send_buf to
  // `right`, and wait for both.
  void exchange(void* recv_buf, size_t recv_bytes, int left, const void* send_buf, size_t send_bytes, int right,
                int tag, const char* what);

  MPI_Comm comm_;
  TrafficCounters& counters_;
  double timeout_s_;
  std::string name_;
  int rank_ = 0, size_ = 1;
  std::vector<int> world_ranks_;  // of each member (the heartbeat names peers by world rank)
  std::vector<char> delayed_peer_;  // per member: on another node, with a latency emulated (else empty)
  std::vector<char> scratch_;
  std::vector<char> reduce_scatter_copy_;  // reduce_scatter's rotated input
};

}  // namespace occ
