#include <cmath>
#include <cstring>
#include <vector>

#include "core/rng.h"
#include "kernels/fast_math.h"
#include "kernels/kernels.h"

namespace occ::kernels {

void gelu_forward(float* out, const float* inp, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float x = inp[i];
    out[i] = 0.5f * x * (1.0f + fast_tanh(kGeluK * (x + kGeluC * x * x * x)));
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float x = inp[i];
    float t = fast_tanh(kGeluK * (x + kGeluC * x * x * x));
    float dt = (1.0f - t * t) * kGeluK * (1.0f + 3.0f * kGeluC * x * x);
    dinp[i] = dout[i] * (0.5f * (1.0f + t) + 0.5f * x * dt);
  }
}

// SwiGLU with std::exp (not fast_exp): silu's sigmoid is evaluated where the
// CUDA twin's expf is, to ~1 ulp.
namespace {
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
}  // namespace

void swiglu_forward(float* out, const float* inp, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* gate = inp + n * 2 * F;
    const float* up = gate + F;
    float* y = out + n * F;
    for (int64_t j = 0; j < F; ++j) y[j] = gate[j] * sigmoid(gate[j]) * up[j];
  }
}

// d/dg [g sigma(g)] = sigma(g) (1 + g (1 - sigma(g))).
void swiglu_backward(float* dinp, const float* inp, const float* dout, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* gate = inp + n * 2 * F;
    const float* up = gate + F;
    const float* dy = dout + n * F;
    float* dgate = dinp + n * 2 * F;
    float* dup = dgate + F;
    for (int64_t j = 0; j < F; ++j) {
      const float g = gate[j], s = sigmoid(g);
      dgate[j] = dy[j] * up[j] * (s * (1.0f + g * (1.0f - s)));
      dup[j] = dy[j] * (g * s);
    }
  }
}

namespace {
// Writes the dropout multipliers (0 or 1/(1-p)) of one row of C elements of
// sample `sample` at element offset `index0` within the sample.
inline void dropout_row(float* scale, const Dropout& d, uint64_t sample, uint64_t index0, int64_t C) {
  const float keep_scale = 1.0f / (1.0f - d.p);
  // One Philox block yields the uniforms of four consecutive elements.
  PhiloxBlock block{};
  for (int64_t c = 0; c < C; ++c) {
    uint64_t idx = index0 + uint64_t(c);
    if (c == 0 || (idx & 3) == 0) block = Philox::block(d.key, sample, idx >> 2);
    scale[c] = bits_to_unit(block[idx & 3]) > d.p ? keep_scale : 0.0f;
  }
}
}  // namespace

namespace {
// One body for both forms; the bias is a compile-time choice so that each loop stays a
// plain vectorised pass (--disable-bias-linear adds none).
template <bool kHasBias>
void residual_dropout_add(float* out, const float* residual, const float* x, const float* bias, const Dropout& d,
                          int64_t N, int64_t T, int64_t C) {
#pragma omp parallel
  {
    std::vector<float> scale(d.active() ? C : 0);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const float* xr = x + n * C;
      const float* rr = residual + n * C;
      float* o = out + n * C;
      if (d.active()) {
        dropout_row(scale.data(), d, d.sample_of(n, T), d.index_of(n, T, C), C);
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) {
          float y = xr[c];
          if constexpr (kHasBias) y += bias[c];
          o[c] = rr[c] + y * scale[c];
        }
      } else {
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) {
          float y = rr[c] + xr[c];
          if constexpr (kHasBias) y += bias[c];
          o[c] = y;
        }
      }
    }
  }
}
}  // namespace

void bias_dropout_add_forward(float* out, const float* residual, const float* x, const float* bias, const Dropout& d,
                              int64_t N, int64_t T, int64_t C) {
  if (bias)
    residual_dropout_add<true>(out, residual, x, bias, d, N, T, C);
  else
    residual_dropout_add<false>(out, residual, x, bias, d, N, T, C);
}

void bias_dropout_add_backward(float* dx, float* dbias, const float* dout, const Dropout& d, int64_t N, int64_t T,
                               int64_t C) {
  if (d.active()) {
#pragma omp parallel
    {
      std::vector<float> scale(C);
#pragma omp for schedule(static)
      for (int64_t n = 0; n < N; ++n) {
        dropout_row(scale.data(), d, d.sample_of(n, T), d.index_of(n, T, C), C);
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) dx[n * C + c] = dout[n * C + c] * scale[c];
      }
    }
  } else if (dx != dout) {
    std::memcpy(dx, dout, sizeof(float) * size_t(N * C));
  }
  if (!dbias) return;  // --disable-bias-linear
  for (int64_t n = 0; n < N; ++n)
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) dbias[c] += dx[n * C + c];
}

void dropout_inplace(float* x, const Dropout& d, int64_t N, int64_t T, int64_t C) {
  if (!d.active()) return;
#pragma omp parallel
  {
    std::vector<float> scale(C);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      dropout_row(scale.data(), d, d.sample_of(n, T), d.index_of(n, T, C), C);
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) x[n * C + c] *= scale[c];
    }
  }
}

void embedding_forward(float* out, const int32_t* tokens, const float* wte, int64_t v0, int64_t V, int64_t N,
                       int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    int64_t row = int64_t(tokens[n]) - v0;
    if (row >= 0 && row < V)
      std::memcpy(out + n * C, wte + row * C, sizeof(float) * size_t(C));
    else
      std::memset(out + n * C, 0, sizeof(float) * size_t(C));
  }
}

void embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int64_t v0, int64_t V, int64_t N,
                        int64_t C) {
  // Tokens repeat, so rows of dwte collide: parallelise over columns instead.
#pragma omp parallel for schedule(static)
  for (int64_t c0 = 0; c0 < C; c0 += 32) {
    int64_t c1 = c0 + 32 < C ? c0 + 32 : C;
    for (int64_t n = 0; n < N; ++n) {
      int64_t row = int64_t(tokens[n]) - v0;
      if (row < 0 || row >= V) continue;
      for (int64_t c = c0; c < c1; ++c) dwte[row * C + c] += dout[n * C + c];
    }
  }
}

void position_forward(float* out, const float* wpe, int64_t N, int64_t T, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n)
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) out[n * C + c] += wpe[(n % T) * C + c];
}

void position_backward(float* dwpe, const float* dout, int64_t N, int64_t T, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = t; n < N; n += T)
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) dwpe[t * C + c] += dout[n * C + c];
}

}  // namespace occ::kernels
