#pragma once
// Non-interleaved 1F1B (PipeDream-Flush, as Megatron): stage s of P runs
// w = min(P - s - 1, M) warm-up forwards, then M - w steady one-forward-one-
// backward pairs, then w cool-down backwards (the epilogue).
#include <vector>

namespace occ {

struct PipelineOp {
  enum Kind { Forward, Backward } kind;
  int micro_batch;
  bool operator==(const PipelineOp&) const = default;
};

std::vector<PipelineOp> one_f_one_b(int num_stages, int stage, int num_micro_batches);
inline int warmup_forwards(int num_stages, int stage, int num_micro_batches) {
  int w = num_stages - stage - 1;
  return w < num_micro_batches ? w : num_micro_batches;
}

}  // namespace occ
