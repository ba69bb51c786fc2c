#include "parallel/sequence_parallel.h"

namespace occ {

void SequenceParallelComm::all_gather(TensorRef full, ConstTensorRef local, int64_t local_values) {
  if (local_values <= 0) return;
  ScopedPhase t(timers_, "tp_allgather");
  // Exact on a 16-bit wire: the step rounded the values to its format.
  wire_allgather(tp_, ops_, full, local, local_values, wire_.activations, Traffic::TensorParallel, scratch_);
}

void SequenceParallelComm::reduce_scatter(TensorRef local, ConstTensorRef full, int64_t local_values) {
  if (local_values <= 0) return;
  ScopedPhase t(timers_, "tp_reduce_scatter");
  // An fp32 wire sums in fp32, the sum rounded once as it is stored (16-bit
  // storage) or here (fp32 storage); a 16-bit wire reduces in the format.
  wire_reduce_scatter(tp_, ops_, local, full, local_values, wire_.activation_sums, Traffic::TensorParallel, scratch_);
  if (local.is_fp32()) ops_.round_to_precision(local.f32(), local_values, precision_);
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
  wire_allreduce_sum(tp_, ops_, grads_.data(), total, wire_.gradients, Traffic::TensorParallel, scratch_);
  at = 0;
  for (const GradSpan& s : spans)
    if (s.grad) {
      ops_.copy(s.grad, grads_.data() + at, s.numel);
      at += s.numel;
    }
}

}  // namespace occ
