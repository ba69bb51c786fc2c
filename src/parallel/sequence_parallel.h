#pragma once
// Megatron's sequence parallelism (--sequence-parallel; Korthikanti et al.
// 2022) as a stage's tensor-parallel group performs it. Between the
// tensor-parallel regions, the residual stream of a micro-batch is split over
// the T ranks of the group: each rank holds the contiguous rows
// [rank * N/T, (rank + 1) * N/T) of the [N = B * seq, C] activation. Megatron
// splits its [s, b, h] tensors along s; ours are batch-major [b, s, h], and
// splitting the flattened rows is the same split up to that transpose (every
// row is one token either way, and the norms, dropout and residual adds that
// run on the shard are per token).
// Before a column-parallel layer the shard is all-gathered; after a
// row-parallel layer the partial sums are reduce-scattered (instead of
// all-reduced); backward mirrors both. On a ring, the all-gather plus the
// reduce-scatter move exactly the all-reduce's bytes.
#include <cstdint>
#include <initializer_list>

#include "comm/communicator.h"
#include "core/buffer.h"
#include "core/precision.h"
#include "core/tensor_ref.h"
#include "core/timer.h"
#include "core/wire_format.h"
#include "kernels/ops.h"
#include "parallel/wire_collectives.h"

namespace occ {

class SequenceParallelComm {
 public:
  // precision: the training precision, to which reduced sums are rounded;
  // wire: the formats the activations, their sums and the parameter gradients travel in.
  SequenceParallelComm(Communicator& tp, kernels::Ops& ops, PhaseTimers& timers, Device device, Precision precision,
                       WireFormats wire = {})
      : tp_(tp), ops_(ops), timers_(timers), precision_(precision), wire_(wire), scratch_(device), grads_(device) {}

  int ranks() const { return tp_.size(); }
  // This rank's share of N rows, and its first row (N is a multiple of ranks(): checked by the options).
  int64_t local_rows(int64_t N) const { return N / tp_.size(); }
  int64_t first_row(int64_t N) const { return local_rows(N) * tp_.rank(); }

  // full[N * width] = every rank's local[N/T * width] in rank order, on the activations' wire.
  void all_gather(TensorRef full, ConstTensorRef local, int64_t local_values);
  // local[N/T * width] = the sum over ranks of their full's rows of this rank,
  // reduced on the activation sums' wire and rounded to the training precision
  // as the all-reduce's sum is.
  void reduce_scatter(TensorRef local, ConstTensorRef full, int64_t local_values);
  // Gradients of the parameters that act on the shard only (norm weights and
  // biases, the row-parallel layers' biases), which each rank holds partial
  // sums of: summed over the group in place, as one all-reduce (Megatron
  // all-reduces the sequence-parallel parameters' gradients, on the gradients'
  // wire as its DP reduction: fp32 unless --grad-reduce-in-bf16). Null entries are skipped.
  struct GradSpan {
    float* grad = nullptr;
    int64_t numel = 0;
  };
  void sum_partial_grads(std::initializer_list<GradSpan> spans);

 private:
  Communicator& tp_;
  kernels::Ops& ops_;
  PhaseTimers& timers_;
  Precision precision_;
  WireFormats wire_;
  WireScratch scratch_;        // tensors converted to their wire's format while they travel
  DeviceBuffer<float> grads_;  // the packed partial gradients
};

}  // namespace occ
