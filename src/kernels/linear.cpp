#include <cblas.h>

#include "kernels/kernels.h"

namespace occ::kernels {

void linear_forward(float* out, const float* inp, const float* w, const float* bias, int64_t N, int64_t C,
                    int64_t OC) {
  float beta = 0.0f;
  if (bias) {
    // Seed the output with the bias so that sgemm adds onto it (beta = 1).
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < OC; ++o) out[n * OC + o] = bias[o];
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(N), int(OC), int(C), 1.0f, inp, int(C), w, int(C), beta,
              out, int(OC));
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
                     int64_t N, int64_t C, int64_t OC, bool accumulate_dinp) {
  if (dinp)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(N), int(C), int(OC), 1.0f, dout, int(OC), w, int(C),
                accumulate_dinp ? 1.0f : 0.0f, dinp, int(C));
  if (dw)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(OC), int(C), int(N), 1.0f, dout, int(OC), inp, int(C),
                1.0f, dw, int(C));
  if (dbias) add_column_sums(dbias, dout, N, OC);
}

}  // namespace occ::kernels
