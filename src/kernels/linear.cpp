#include "kernels/cpu_gemm.h"
#include "kernels/kernels.h"

namespace occ::kernels {

void linear_forward(float* out, const float* inp, const float* w, const float* bias, int64_t N, int64_t C, int64_t OC,
                    Precision operands) {
  float beta = 0.0f;
  if (bias) {
    // Seed the output with the bias so that sgemm adds onto it (beta = 1).
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < OC; ++o) out[n * OC + o] = bias[o];
    beta = 1.0f;
  }
  gemm({false, true, N, OC, C, 1.0f, inp, C, w, C, beta, out, OC}, operands);
}

void add_column_sums(float* sums, const float* x, int64_t N, int64_t C) {
  // Parallel over column blocks so no two threads share an output.
#pragma omp parallel for schedule(static)
  for (int64_t c0 = 0; c0 < C; c0 += 64) {
    const int64_t c1 = c0 + 64 < C ? c0 + 64 : C;
    for (int64_t n = 0; n < N; ++n) {
      const float* row = x + n * C;
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) sums[c] += row[c];
    }
  }
}

void linear_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp, const float* w,
                     int64_t N, int64_t C, int64_t OC, bool accumulate_dinp, Precision operands) {
  // dX = dY W and dW += dY^T X read dY's one copy (A, stored [N, OC] in both).
  const Gemm dx_product{false, false, N, C, OC, 1.0f, dout, OC, w, C, accumulate_dinp ? 1.0f : 0.0f, dinp, C};
  const Gemm dw_product{true, false, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dw, C};
  if (dinp && dw)
    gemm_pair_sharing_a(dx_product, dw_product, operands);
  else if (dinp)
    gemm(dx_product, operands);
  else if (dw)
    gemm(dw_product, operands);
  if (dbias) add_column_sums(dbias, dout, N, OC);
}

}  // namespace occ::kernels
