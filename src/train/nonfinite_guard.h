#pragma once
// The non-finite guard: an iteration whose loss or gradient norm is not finite
// never reaches the optimizer (so no checkpoint is ever written from such a
// state). --skip-nonfinite N lets up to N such iterations be skipped (counted
// in the metrics); past that the run stops with one line naming the iteration,
// the stage and rank, and the first parameter tensor whose gradient is not
// finite (an AgreedError: every rank throws it at once). fp16's dynamic loss
// scaling skips overflows its own way and is left to it.
#include <cstdint>
#include <string>

#include "comm/communicator.h"
#include "core/layout.h"
#include "kernels/ops.h"
#include "model/params.h"

namespace occ {

class NonfiniteGuard {
 public:
  explicit NonfiniteGuard(int64_t skip_budget) : budget_(skip_budget) {}

  // Collective over `world`. Returns true when the iteration must skip its
  // update; throws AgreedError when the budget is spent. loss and grad_norm
  // are the all-reduced values, equal on every rank.
  bool check(Communicator& world, const ParallelLayout& layout, kernels::Ops& ops, const ParamLayout& params,
             const float* grads, int64_t iteration, double loss, double grad_norm);

  int64_t skipped() const { return skipped_; }
  void restore(int64_t skipped) { skipped_ = skipped; }

 private:
  int64_t budget_;
  int64_t skipped_ = 0;
};

}  // namespace occ
