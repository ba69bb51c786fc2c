#include "parallel/pipeline_schedule.h"

#include <cstddef>

namespace occ {

std::vector<PipelineOp> one_f_one_b(int num_stages, int stage, int num_micro_batches) {
  const int M = num_micro_batches, w = warmup_forwards(num_stages, stage, M);
  std::vector<PipelineOp> ops;
  ops.reserve(std::size_t(2 * M));
  for (int i = 0; i < w; ++i) ops.push_back({PipelineOp::Forward, i});
  for (int i = 0; i < M - w; ++i) {
    ops.push_back({PipelineOp::Forward, w + i});
    ops.push_back({PipelineOp::Backward, i});
  }
  for (int i = M - w; i < M; ++i) ops.push_back({PipelineOp::Backward, i});
  return ops;
}

}  // namespace occ
