#include <cmath>

#include "kernels/kernels.h"

namespace occ::kernels {

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                       int64_t N, int64_t C, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    float* y = out + n * C;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < C; ++c) sum += x[c];
    const float m = sum / float(C);
    float var = 0.0f;
#pragma omp simd reduction(+ : var)
    for (int64_t c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    const float s = 1.0f / std::sqrt(var / float(C) + eps);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) y[c] = (x[c] - m) * s * w[c] + b[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                        const float* mean, const float* rstd, int64_t N, int64_t C) {
  // Input gradient: rows are independent.
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* dy = dout + n * C;
    const float* x = inp + n * C;
    float* dx = dinp + n * C;
    const float m = mean[n], s = rstd[n];
    float sum_g = 0.0f, sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_g, sum_gx)
    for (int64_t c = 0; c < C; ++c) {
      float g = dy[c] * w[c];
      sum_g += g;
      sum_gx += g * (x[c] - m) * s;
    }
    sum_g /= float(C);
    sum_gx /= float(C);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      float xhat = (x[c] - m) * s;
      dx[c] += s * (dy[c] * w[c] - sum_g - xhat * sum_gx);
    }
  }
  // Parameter gradients: reductions over rows, parallel over column blocks.
#pragma omp parallel for schedule(static)
  for (int64_t c0 = 0; c0 < C; c0 += 32) {
    int64_t c1 = c0 + 32 < C ? c0 + 32 : C;
    for (int64_t n = 0; n < N; ++n) {
      const float* dy = dout + n * C;
      const float* x = inp + n * C;
      const float m = mean[n], s = rstd[n];
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) {
        dw[c] += dy[c] * (x[c] - m) * s;
        db[c] += dy[c];
      }
    }
  }
}

// RMSNorm: LayerNorm without the mean and the bias, term for term in the same
// order (the CUDA row kernels share this formula with a flag).
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int64_t N, int64_t C, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    float* y = out + n * C;
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < C; ++c) ss += x[c] * x[c];
    const float s = 1.0f / std::sqrt(ss / float(C) + eps);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) y[c] = x[c] * s * w[c];
    rstd[n] = s;
  }
}

// y = x s w with s = (mean(x^2) + eps)^-1/2: dx = s (g - xhat mean(g xhat)), g = dy w, xhat = x s.
void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, const float* rstd,
                      int64_t N, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* dy = dout + n * C;
    const float* x = inp + n * C;
    float* dx = dinp + n * C;
    const float s = rstd[n];
    float sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_gx)
    for (int64_t c = 0; c < C; ++c) sum_gx += dy[c] * w[c] * x[c] * s;
    sum_gx /= float(C);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) dx[c] += s * (dy[c] * w[c] - x[c] * s * sum_gx);
  }
#pragma omp parallel for schedule(static)
  for (int64_t c0 = 0; c0 < C; c0 += 32) {
    int64_t c1 = c0 + 32 < C ? c0 + 32 : C;
    for (int64_t n = 0; n < N; ++n) {
      const float* dy = dout + n * C;
      const float* x = inp + n * C;
      const float s = rstd[n];
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) dw[c] += dy[c] * x[c] * s;
    }
  }
}

}  // namespace occ::kernels
