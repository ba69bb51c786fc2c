#pragma once
// A process group over NCCL: collectives and point-to-point transfers on device
// memory, one GPU per rank, on a CUDA stream of the group's own (so a reducer
// thread's DP buckets run beside the backward's kernels). Launch stays mpirun:
// MPI carries NCCL's unique id to the group's ranks. The communicator is
// non-blocking (ncclConfig_t.blocking = 0): every wait polls, and past
// --comm-timeout it ends the job (MPI_Abort), so a dead rank does not hang it.
// Bytes are counted per traffic class as the ring algorithm sends them
// (comm/ring_volume.h), the same count the MPI rings make. NCCL itself is loaded on first use (comm/nccl_loader.cpp): CPU
// runs never need it.
#include <cstdint>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/mpi_communicator.h"
#include "core/device.h"

namespace occ {

// "2.28.9" when NCCL can be loaded; otherwise empty, with *why saying what is missing.
std::string nccl_version(std::string* why);

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `group`: its ranks form an NCCL communicator on the GPU
  // each has selected (use_cuda_device). When that fails on any rank (no NCCL,
  // two ranks on one GPU, a timeout) every rank of the group gets null and
  // *why (this rank's reason, or the rank that failed). Bytes go to group's counters.
  static std::unique_ptr<NcclCommunicator> create(MpiCommunicator& group, double timeout_s, std::string* why);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // Device pointers, in the buffers' format (fp32, bf16 or fp16: NCCL's own
  // types, a 16-bit sum reduced in the format). Each returns when the result
  // is in place (the group's stream waits for the work queued before the call
  // on the legacy stream).
  void allreduce_sum(TensorRef data, size_t count, Traffic traffic) override;
  void allreduce_max(float* data, size_t count, Traffic traffic) override;
  void allgather(ConstTensorRef in, TensorRef out, size_t count, Traffic traffic) override;
  void reduce_scatter(ConstTensorRef in, TensorRef out, size_t count, Traffic traffic) override;
  // In-place mean over the group (ncclAvg). ready (optional): the group's
  // stream waits for the work before this mark instead (core/device.h), so a
  // gradient bucket goes as soon as its own kernels are done.
  void allreduce_mean(TensorRef data, size_t count, Traffic traffic, const DeviceMark* ready = nullptr);
  // After it, this rank's ring_owned_chunk of data holds the group's mean; the
  // other chunks are left as they were (MpiCommunicator leaves partial sums
  // there; nobody reads them). The chunks are the MPI ring's (uneven when size
  // does not divide count), so the distributed optimizer's shards are the same.
  void reduce_scatter_mean(TensorRef data, size_t count, Traffic traffic, const DeviceMark* ready = nullptr);
  // Sends send_bytes to rank `to` while receiving recv_bytes from rank `from`
  // (one NCCL group: a ring shift cannot deadlock; to == from == rank() copies).
  void sendrecv(const void* send, size_t send_bytes, int to, void* recv, size_t recv_bytes, int from, Traffic traffic);
  // A pipeline link's halves (the group has two ranks, the sender and the
  // receiver of one kind of message: parallel/pipeline_links.h). send_async
  // queues the send on the group's stream after the work queued before it and
  // returns its number (0, 1, ...) at once; the buffer must stay untouched
  // until sends_done() (which polls, never waits) exceeds that number, or
  // wait_sends() returns. Sends are received in the order they were queued.
  // recv returns when the message is in place.
  uint64_t send_async(const void* data, size_t bytes, int to, Traffic traffic);
  uint64_t sends_done();
  void wait_sends();
  void recv(void* data, size_t bytes, int from);

  const std::string& name() const { return name_; }

 private:
  struct Impl;
  NcclCommunicator(std::unique_ptr<Impl> impl, TrafficCounters& counters, std::string name, int rank, int size);

  std::unique_ptr<Impl> impl_;
  TrafficCounters& counters_;
  std::string name_;
  int rank_ = 0, size_ = 1;
};

}  // namespace occ
