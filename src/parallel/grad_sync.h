#pragma once
// Data-parallel gradient averaging in buckets, overlapped with backward: the
// last micro-batch's backward reports how far its gradients are final
// (offsets fall as backward walks from the last layer to the embeddings), and
// every bucket entirely inside the final region is all-reduced at once by a
// reducer thread on its own handle of the DP group.
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/mpi_communicator.h"
#include "core/timer.h"
#include "model/params.h"

namespace occ {

struct GradBucket {
  int64_t begin = 0, end = 0;  // element range of the grad buffer, whole tensors
};

// Buckets of about bucket_elems elements, whole tensors each, over the tensors
// for which include(tensor) is true, ordered from the end of the buffer
// (the order in which backward finalises them).
template <class Pred>
std::vector<GradBucket> make_buckets(const ParamLayout& layout, int64_t bucket_elems, Pred include) {
  std::vector<GradBucket> buckets;
  const auto& ts = layout.tensors();
  GradBucket cur{-1, -1};
  for (auto it = ts.rbegin(); it != ts.rend(); ++it) {
    const bool take = include(*it);
    const bool contiguous = cur.begin == it->offset + it->numel;
    if (!take || !contiguous || cur.end - cur.begin >= bucket_elems) {
      if (cur.end > cur.begin) buckets.push_back(cur);
      cur = {-1, -1};
    }
    if (!take) continue;
    if (cur.end < 0) cur = {it->offset, it->offset + it->numel};
    else cur.begin = it->offset;
  }
  if (cur.end > cur.begin) buckets.push_back(cur);
  return buckets;
}

class DataParallelReducer {
 public:
  DataParallelReducer(MpiCommunicator& dp_async, std::vector<GradBucket> buckets, float* grads);
  ~DataParallelReducer();

  void begin_iteration();
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

  MpiCommunicator& comm_;
  std::vector<GradBucket> buckets_;
  float* grads_;
  size_t next_ = 0;  // buckets_[0, next_) queued this iteration
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<size_t> queue_;
  size_t done_ = 0;
  bool stop_ = false;
  double busy_s_ = 0;
  std::vector<TraceEvent> events_;
  std::thread thread_;
};

}  // namespace occ
