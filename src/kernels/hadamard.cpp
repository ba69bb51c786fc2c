// The CPU's randomized Hadamard rotation (hadamard.h), and its simple twin: the
// dense matrix product from the definition, in double, that tests hold the fast
// transform (and through it the CUDA one) to.
#include <cmath>
#include <vector>

#include "kernels/kernels.h"

namespace occ::kernels {

void rotate_rows(const float* in, float* out, int64_t n, int64_t c, int block, uint64_t key, bool inverse) {
  const int64_t pieces = rotation_pieces_per_row(c, block);
#pragma omp parallel for schedule(static) if (n * c >= (1 << 16))
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < pieces; ++p) {
      int64_t start = 0;
      int len = 0;
      rotation_piece(c, block, p, &start, &len);
      rotate_piece(in + i * c + start, out + i * c + start, len, key, i, start, inverse);
    }
}

void rotate_rows_reference(const float* in, float* out, int64_t n, int64_t c, int block, uint64_t key, bool inverse) {
  std::vector<double> y;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < rotation_pieces_per_row(c, block); ++p) {
      int64_t start = 0;
      int len = 0;
      rotation_piece(c, block, p, &start, &len);
      const double s = 1.0 / std::sqrt(double(len));
      auto sign = [&](int j) { return rotation_sign_negative(key, i, start + j) ? -1.0 : 1.0; };
      y.assign(size_t(len), 0.0);
      // forward: y_r = s sum_j H_rj d_j x_j; inverse: x_r = d_r s sum_j H_rj y_j (H symmetric).
      for (int r = 0; r < len; ++r) {
        double sum = 0.0;
        for (int j = 0; j < len; ++j) {
          const double h = (__builtin_popcount(unsigned(r & j)) & 1) ? -1.0 : 1.0;
          sum += h * (inverse ? 1.0 : sign(j)) * double(in[i * c + start + j]);
        }
        y[size_t(r)] = s * sum * (inverse ? sign(r) : 1.0);
      }
      for (int r = 0; r < len; ++r) out[i * c + start + r] = float(y[size_t(r)]);
    }
}

}  // namespace occ::kernels
