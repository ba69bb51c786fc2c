#include "train/nonfinite_guard.h"

#include <cmath>
#include <vector>

namespace occ {

bool NonfiniteGuard::check(Communicator& world, const ParallelLayout& layout, kernels::Ops& ops,
                           const ParamLayout& params, const float* grads, int64_t iteration, double loss,
                           double grad_norm) {
  if (std::isfinite(loss) && std::isfinite(grad_norm)) return false;
  if (skipped_ < budget_) {
    ++skipped_;
    return true;
  }
  // Which rank holds the first non-finite gradient tensor (in its stage's parameter
  // order)? Every rank sets its own slot: the index + 1 of its first such tensor.
  const auto& tensors = params.tensors();
  int first = -1;
  for (size_t i = 0; i < tensors.size() && first < 0; ++i)
    if (!std::isfinite(ops.sum_squares(grads + tensors[i].offset, tensors[i].numel))) first = int(i);
  std::vector<float> slots(size_t(world.size()), 0.0f);
  slots[size_t(world.rank())] = float(first + 1);
  world.allreduce_sum(slots.data(), slots.size(), Traffic::Other);
  int reporter = 0;
  while (reporter < world.size() && slots[size_t(reporter)] == 0.0f) ++reporter;
  const std::string what = fmt::format("iteration {}: the {} is not finite (loss {}, gradient norm {})", iteration,
                                       std::isfinite(loss) ? "gradient norm" : "loss", loss, grad_norm);
  const std::string fix = "the update was not applied and no checkpoint was written from this state; resume from "
                          "the last checkpoint with a lower --lr or --clip-grad, or allow --skip-nonfinite N";
  if (reporter == world.size())  // every gradient finite: the loss alone (or its sum) overflowed
    throw AgreedError(fmt::format("{}; every gradient is finite; {}", what, fix), 0);
  std::string where;
  if (world.rank() == reporter)
    where = fmt::format("first non-finite gradient: {} on pipeline stage {} (rank {}, tensor-parallel rank {}, "
                        "data-parallel rank {})",
                        tensors[size_t(first)].name, layout.pp_rank, world.rank(), layout.tp_rank, layout.dp_rank);
  throw AgreedError(fmt::format("{}; {}; {}", what, where, fix), reporter);
}

}  // namespace occ
