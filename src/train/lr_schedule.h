#pragma once
// Learning rate per update: linear warm-up, then cosine / linear decay to
// min_lr (or constant). Counted in steps: iterations, or samples for a
// sample-based run (--train-samples, --lr-warmup-samples, --lr-decay-samples:
// update `it` is then step it x the global batch, as Megatron's scheduler steps
// by the batch's samples). Update `it` is 1-based, so the first update already
// has a non-zero rate.
#include <cmath>
#include <cstdint>
#include <string>

#include "core/error.h"

namespace occ {

struct LrSchedule {
  float max_lr = 1e-4f, min_lr = 0.0f;
  int64_t warmup_steps = 0, decay_steps = 1;
  int64_t steps_per_iteration = 1;  // 1, or the global batch when counted in samples
  std::string style = "cosine";  // cosine | linear | constant

  void validate() const {
    OCC_CHECK(style == "cosine" || style == "linear" || style == "constant",
              "--lr-decay-style '{}' is not one of cosine, linear, constant", style);
    OCC_CHECK(max_lr >= 0 && min_lr >= 0 && min_lr <= max_lr, "need 0 <= --min-lr ({}) <= --lr ({})", min_lr, max_lr);
    OCC_CHECK(warmup_steps >= 0, "learning-rate warm-up must be >= 0 iterations (or samples)");
  }

  float at(int64_t it) const {
    const int64_t step = it * steps_per_iteration;
    if (warmup_steps > 0 && step <= warmup_steps) return max_lr * float(step) / float(warmup_steps);
    if (style == "constant") return max_lr;
    if (step >= decay_steps) return min_lr;
    const double ratio = double(step - warmup_steps) / double(decay_steps - warmup_steps);
    const double coeff = style == "cosine" ? 0.5 * (1.0 + std::cos(M_PI * ratio)) : 1.0 - ratio;
    return float(min_lr + (max_lr - min_lr) * coeff);
  }
};

}  // namespace occ
