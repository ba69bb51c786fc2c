#include "parallel/grad_sync.h"

#include <fmt/format.h>

#include "core/error.h"

namespace occ {

DataParallelReducer::DataParallelReducer(MpiCommunicator& dp_async, std::vector<GradBucket> buckets,
                                         HostMirror& grads, bool reduce_scatter, NcclCommunicator* nccl,
                                         Precision wire, kernels::Ops* ops)
    : comm_(dp_async),
      nccl_(nccl),
      wire_(wire),
      ops_(ops),
      device_wire_(grads.device(), wire),
      buckets_(std::move(buckets)),
      grads_(grads),
      copies_(grads.device()),
      reduce_scatter_(reduce_scatter) {
  OCC_CHECK(!nccl_ || wire_ == Precision::Fp32 || (ops_ && ops_->device() == grads.device()),
            "internal: a {} gradient wire over NCCL needs the gradients' ops", precision_name(wire_));
  ready_.reserve(buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) ready_.emplace_back(grads.device());
  if (comm_.size() > 1) thread_ = std::thread([this] { worker(); });
}

DataParallelReducer::~DataParallelReducer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void DataParallelReducer::begin_iteration(bool skip_group1) {
  std::lock_guard<std::mutex> lock(mu_);
  next_ = 0;
  done_ = 0;
  busy_s_ = 0;
  skip_group1_ = skip_group1;
  expected_ = 0;
  for (const auto& b : buckets_) expected_ += (skip_group1 && b.compressible()) ? 0 : 1;
}

void DataParallelReducer::grads_final_from(int64_t offset) {
  if (comm_.size() == 1) return;
  std::lock_guard<std::mutex> lock(mu_);
  bool queued = false;
  for (; next_ < buckets_.size() && buckets_[next_].begin >= offset; ++next_) {
    if (skip_group1_ && buckets_[next_].compressible()) continue;
    ready_[next_].record();  // the kernels that wrote the bucket are queued before this point
    queue_.push_back(next_);
    queued = true;
  }
  if (queued) cv_.notify_all();
}

double DataParallelReducer::finish() {
  if (comm_.size() == 1) return 0.0;
  grads_final_from(0);
  const double start = now_seconds();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_ == expected_; });
  return now_seconds() - start;
}

std::vector<TraceEvent> DataParallelReducer::take_events() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::move(events_);
}

// MPI: the bucket's host view, downloaded (once the backward kernels that
// wrote it are done), reduced, averaged, uploaded.
void DataParallelReducer::reduce_on_host(size_t b, size_t begin, size_t n) {
  const float inv = 1.0f / float(comm_.size());
  grads_.download(begin, n, copies_, ready_[b]);
  float* g = grads_.host() + begin;
  // The elements that come out averaged: the owned chunk, or all of them.
  const MpiCommunicator::Chunk own = reduce_scatter_ ? comm_.owned_chunk(n) : MpiCommunicator::Chunk{0, n};
  if (wire_ == Precision::Fp32) {
    if (reduce_scatter_)
      comm_.reduce_scatter_sum(g, n, Traffic::DataParallel);
    else
      comm_.allreduce_sum(g, n, Traffic::DataParallel);
  } else {
    host_wire_.resize(n);
    for (size_t i = 0; i < n; ++i) host_wire_[i] = sixteen_bits(wire_, g[i]);
    const TensorRef w(host_wire_.data(), wire_);
    if (reduce_scatter_)
      comm_.reduce_scatter_sum(w, n, Traffic::DataParallel);
    else
      comm_.allreduce_sum(w, n, Traffic::DataParallel);
    for (size_t i = own.lo; i < own.lo + own.len; ++i) g[i] = sixteen_value(wire_, host_wire_[i]);
  }
  for (size_t i = own.lo; i < own.lo + own.len; ++i) g[i] *= inv;
  grads_.upload(begin, n, copies_);
}

// NCCL: averaged on the device; the group's stream waits for the backward
// kernels that wrote the bucket.
void DataParallelReducer::reduce_on_device(size_t b, size_t begin, size_t n) {
  float* g = grads_.device_data() + begin;
  if (wire_ == Precision::Fp32) {
    if (reduce_scatter_)
      nccl_->reduce_scatter_mean(g, n, Traffic::DataParallel, &ready_[b]);
    else
      nccl_->allreduce_mean(g, n, Traffic::DataParallel, &ready_[b]);
    return;
  }
  // The conversion runs on the compute queue (after what is queued there
  // now, the bucket's kernels among it); NCCL waits for it.
  if (device_wire_.size() < n) device_wire_.resize(n);
  const TensorRef w = device_wire_.ref();
  ops_->copy(w, g, int64_t(n));
  if (reduce_scatter_)
    nccl_->reduce_scatter_mean(w, n, Traffic::DataParallel);
  else
    nccl_->allreduce_mean(w, n, Traffic::DataParallel);
  const MpiCommunicator::Chunk own = reduce_scatter_ ? comm_.owned_chunk(n) : MpiCommunicator::Chunk{0, n};
  ops_->copy(g + own.lo, w + int64_t(own.lo), int64_t(own.len));
}

void DataParallelReducer::worker() {
  bind_thread_to_device(grads_.device());  // the staging copies run on the stage's GPU
  for (;;) {
    size_t b;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      b = queue_.front();
      queue_.pop_front();
    }
    const double start = now_seconds();
    const size_t begin = size_t(buckets_[b].begin), n = size_t(buckets_[b].end - buckets_[b].begin);
    if (nccl_)
      reduce_on_device(b, begin, n);
    else
      reduce_on_host(b, begin, n);
    {
      std::lock_guard<std::mutex> lock(mu_);
      const double end = now_seconds();
      busy_s_ += end - start;
      events_.push_back({fmt::format("dp_{} bucket {} ({} floats)", reduce_scatter_ ? "reduce_scatter" : "allreduce",
                                     b, n), start, end, 1});
      ++done_;
    }
    cv_.notify_all();
  }
}

}  // namespace occ
