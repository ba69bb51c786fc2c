#pragma once
// Learning rate per update: linear warm-up, then cosine / linear decay to
// min_lr (or constant). Counted in iterations; update `it` is 1-based, so the
// first update already has a non-zero rate.
#include <cmath>
#include <string>

#include "core/error.h"

namespace occ {

struct LrSchedule {
  float max_lr = 1e-4f, min_lr = 0.0f;
  int64_t warmup_iters = 0, decay_iters = 1;
  std::string style = "cosine";  // cosine | linear | constant

  void validate() const {
    OCC_CHECK(style == "cosine" || style == "linear" || style == "constant",
              "--lr-decay-style '{}' is not one of cosine, linear, constant", style);
    OCC_CHECK(max_lr >= 0 && min_lr >= 0 && min_lr <= max_lr, "need 0 <= --min-lr ({}) <= --lr ({})", min_lr, max_lr);
    OCC_CHECK(warmup_iters >= 0, "learning-rate warm-up must be >= 0 iterations");
  }

  float at(int64_t it) const {
    if (warmup_iters > 0 && it <= warmup_iters) return max_lr * float(it) / float(warmup_iters);
    if (style == "constant") return max_lr;
    if (it >= decay_iters) return min_lr;
    const double ratio = double(it - warmup_iters) / double(decay_iters - warmup_iters);
    const double coeff = style == "cosine" ? 0.5 * (1.0 + std::cos(M_PI * ratio)) : 1.0 - ratio;
    return float(min_lr + (max_lr - min_lr) * coeff);
  }
};

}  // namespace occ
