#include "data/blending_index.h"

#include <algorithm>

#include "core/error.h"

namespace occ {

void build_blending_index(const std::vector<double>& weights, int64_t size, int16_t* dataset, int64_t* dataset_sample) {
  const size_t D = weights.size();
  OCC_CHECK(D >= 1 && D < 32767, "a blend of {} datasets: Megatron's blending index takes 1 to 32766", D);
  std::vector<int64_t> current(D, 0);
  for (int64_t i = 0; i < size; ++i) {
    const double at = std::max(double(i), 1.0);
    size_t best = 0;
    double best_error = 0;
    for (size_t d = 0; d < D; ++d) {
      // volatile: the product is rounded to double on its own, never contracted
      // with the subtraction into a fused multiply-add (GNU modes contract by default).
      volatile double product = weights[d] * at;
      const double error = product - double(current[d]);
      if (d == 0 || error > best_error) best_error = error, best = d;
    }
    dataset[i] = int16_t(best);
    dataset_sample[i] = current[best]++;
  }
}

}  // namespace occ
