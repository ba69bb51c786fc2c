#include "parallel/sequence_parallel.h"

namespace occ {

void SequenceParallelComm::all_gather(TensorRef full, ConstTensorRef local, int64_t local_values) {
  if (local_values <= 0) return;
  ScopedPhase t(timers_, "tp_allgather");
  const size_t n = size_t(local_values), total = n * size_t(tp_.size());
  if (full.is_fp32() && local.is_fp32()) {
    tp_.allgather(local.f32(), full.f32(), n, Traffic::TensorParallel);
    return;
  }
  gather_in_.resize(n);
  gather_out_.resize(total);
  ops_.copy(gather_in_.data(), local, local_values);
  tp_.allgather(gather_in_.data(), gather_out_.data(), n, Traffic::TensorParallel);
  ops_.copy(full, gather_out_.data(), int64_t(total));  // exact: the values were of the format
}

void SequenceParallelComm::reduce_scatter(TensorRef local, ConstTensorRef full, int64_t local_values) {
  if (local_values <= 0) return;
  ScopedPhase t(timers_, "tp_reduce_scatter");
  const size_t n = size_t(local_values), total = n * size_t(tp_.size());
  if (full.is_fp32() && local.is_fp32()) {
    tp_.reduce_scatter(full.f32(), local.f32(), n, Traffic::TensorParallel);
    ops_.round_to_precision(local.f32(), local_values, precision_);
    return;
  }
  // 16-bit storage: summed in fp32, the sum rounded once as it is stored.
  gather_in_.resize(total);
  gather_out_.resize(n);
  ops_.copy(gather_in_.data(), full, int64_t(total));
  tp_.reduce_scatter(gather_in_.data(), gather_out_.data(), n, Traffic::TensorParallel);
  ops_.copy(local, gather_out_.data(), local_values);
}

void SequenceParallelComm::sum_partial_grads(std::initializer_list<GradSpan> spans) {
  int64_t total = 0;
  for (const GradSpan& s : spans)
    if (s.grad) total += s.numel;
  if (total == 0 || tp_.size() == 1) return;
  ScopedPhase t(timers_, "tp_allreduce");
  grads_.resize(size_t(total));
  int64_t at = 0;
  for (const GradSpan& s : spans)
    if (s.grad) {
      ops_.copy(grads_.data() + at, s.grad, s.numel);
      at += s.numel;
    }
  tp_.allreduce_sum(grads_.data(), size_t(total), Traffic::TensorParallel);
  at = 0;
  for (const GradSpan& s : spans)
    if (s.grad) {
      ops_.copy(s.grad, grads_.data() + at, s.numel);
      at += s.numel;
    }
}

}  // namespace occ
