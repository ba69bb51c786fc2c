#pragma once
// Data-parallel gradient averaging in buckets, overlapped with backward: the
// last micro-batch's backward reports how far its gradients are final
// (offsets fall as backward walks from the last layer to the embeddings), and
// every bucket entirely inside the final region is all-reduced at once by a
// reducer thread on its own handle of the DP group. On a GPU the report also
// marks the compute queue there (core/device.h DeviceMark): the bucket's
// copies (staged) or NCCL collective wait for the kernels before the mark
// only, not for the rest of the backward that the compute thread has queued
// since, so the bucket's traffic runs beside that backward.
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/mpi_communicator.h"
#include "comm/nccl_communicator.h"
#include "core/host_staging.h"
#include "core/tensor_buffer.h"
#include "core/tensor_desc.h"
#include "core/timer.h"
#include "kernels/ops.h"

namespace occ {

struct GradBucket {
  int64_t begin = 0, end = 0;  // element range of the grad buffer, whole tensors
  int group = 0;               // bit 0: matrices that DP PowerSGD may take instead; other bits only keep
                               // tensors apart (a group never shares a bucket with another)
  bool compressible() const { return group & 1; }
};

// Buckets of about bucket_elems elements, whole tensors of one group each,
// ordered from the end of the buffer (the order in which backward finalises
// them). tensors: the buffer's tensors in offset order; group_of(tensor) < 0
// leaves a tensor out.
template <class GroupOf>
std::vector<GradBucket> make_buckets(const std::vector<TensorDesc>& tensors, int64_t bucket_elems, GroupOf group_of) {
  std::vector<GradBucket> buckets;
  GradBucket cur{-1, -1, 0};
  for (auto it = tensors.rbegin(); it != tensors.rend(); ++it) {
    const int group = group_of(*it);
    const bool joins = cur.end >= 0 && group == cur.group && cur.begin == it->offset + it->numel &&
                       cur.end - cur.begin < bucket_elems;
    if (!joins && cur.end >= 0) {
      buckets.push_back(cur);
      cur = {-1, -1, 0};
    }
    if (group < 0) continue;
    if (cur.end < 0)
      cur = {it->offset, it->offset + it->numel, group};
    else
      cur.begin = it->offset;
  }
  if (cur.end >= 0) buckets.push_back(cur);
  return buckets;
}

class DataParallelReducer {
 public:
  // reduce_scatter (the distributed optimizer): each bucket is reduce-scattered
  // instead of all-reduced, so only this rank's owned_chunk() of it is
  // averaged (OptimizerShards); the rest holds partial sums.
  // grads: the gradient buffer's host view; staged (a GPU), each bucket is
  // downloaded before it is reduced and uploaded after. nccl (the same DP
  // group over NCCL): buckets are averaged on the device instead, no copies.
  // wire: the format the gradients travel in (core/wire_format.h: fp32, or
  // bf16 with --grad-reduce-in-bf16: each bucket rounded to it for the trip,
  // reduced in it, and widened back before the division by the group size);
  // a 16-bit wire over NCCL converts on the device with `ops` (its queue:
  // the conversion follows the kernels queued before it, not only the bucket's).
  DataParallelReducer(MpiCommunicator& dp_async, std::vector<GradBucket> buckets, HostMirror& grads,
                      bool reduce_scatter = false, NcclCommunicator* nccl = nullptr,
                      Precision wire = Precision::Fp32, kernels::Ops* ops = nullptr);
  ~DataParallelReducer();

  // skip_group1: this iteration DP PowerSGD averages the group-1 buckets.
  void begin_iteration(bool skip_group1);
  // Gradients at offsets >= offset are final: queue the buckets now covered.
  void grads_final_from(int64_t offset);
  // Queues what is left, waits until every bucket is averaged; returns the seconds waited.
  double finish();
  double busy_seconds() const { return busy_s_; }
  // The reducer thread's timed buckets of this iteration (for the trace).
  std::vector<TraceEvent> take_events();
  const std::vector<GradBucket>& buckets() const { return buckets_; }

 private:
  void worker();
  void reduce_on_host(size_t b, size_t begin, size_t n);
  void reduce_on_device(size_t b, size_t begin, size_t n);

  MpiCommunicator& comm_;
  NcclCommunicator* nccl_;
  Precision wire_;
  kernels::Ops* ops_;
  std::vector<uint16_t> host_wire_;  // a bucket in 16 bits on the host (MPI)
  TensorBuffer device_wire_;         // ... on the device (NCCL)
  std::vector<GradBucket> buckets_;
  HostMirror& grads_;
  std::vector<DeviceMark> ready_;  // per bucket: where its gradients were final on the compute queue
  CopyQueue copies_;               // the reducer thread's staging copies
  size_t next_ = 0;  // buckets_[0, next_) queued this iteration
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<size_t> queue_;
  size_t done_ = 0, expected_ = 0;
  bool skip_group1_ = false;
  bool reduce_scatter_ = false;
  bool stop_ = false;
  double busy_s_ = 0;
  std::vector<TraceEvent> events_;
  std::thread thread_;
};

}  // namespace occ
