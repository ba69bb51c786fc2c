#include <cblas.h>

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "kernels/fast_math.h"
#include "kernels/kernels.h"

namespace occ::kernels {

// Each (sample, head) pair is an independent T x T problem; OpenMP spreads the
// pairs over threads and each BLAS call inside runs single-threaded (OpenBLAS
// built with OpenMP does not nest).

namespace {
// Attention dropout multiplier for row tq of head (global) h of sample b.
inline void attention_dropout_row(float* scale, const Dropout& d, uint64_t sample, uint64_t h, int64_t T, int64_t tq) {
  const float keep_scale = 1.0f / (1.0f - d.p);
  const uint64_t index0 = (h * uint64_t(T) + uint64_t(tq)) * uint64_t(T);
  PhiloxBlock block{};
  for (int64_t tk = 0; tk <= tq; ++tk) {
    uint64_t idx = index0 + uint64_t(tk);
    if (tk == 0 || (idx & 3) == 0) block = Philox::block(d.key, sample, idx >> 2);
    scale[tk] = bits_to_unit(block[idx & 3]) > d.p ? keep_scale : 0.0f;
  }
}
}  // namespace

void attention_forward(float* out, float* probs, float* probs_dropped, const float* qkv, const AttentionShape& s,
                       const Dropout& d) {
  const int64_t B = s.B, T = s.T, H = s.H, D = s.D;
  const int64_t ld = H * 3 * D;  // row stride of qkv
  const float scale = 1.0f / std::sqrt(float(D));
#pragma omp parallel
  {
    std::vector<float> drop(d.active() ? T : 0);
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < B * H; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      const float* q = qkv + b * T * ld + h * 3 * D;
      const float* k = q + D;
      const float* v = q + 2 * D;
      float* P = probs + bh * T * T;
      // P = scale * Q K^T (the upper triangle is overwritten by the mask below).
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(T), int(T), int(D), scale, q, int(ld), k, int(ld), 0.0f,
                  P, int(T));
      for (int64_t tq = 0; tq < T; ++tq) {
        float* row = P + tq * T;
        float mx = -INFINITY;
        for (int64_t tk = 0; tk <= tq; ++tk) mx = row[tk] > mx ? row[tk] : mx;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t tk = 0; tk <= tq; ++tk) {
          row[tk] = fast_exp(row[tk] - mx);
          sum += row[tk];
        }
        const float inv = 1.0f / sum;
#pragma omp simd
        for (int64_t tk = 0; tk <= tq; ++tk) row[tk] *= inv;
        for (int64_t tk = tq + 1; tk < T; ++tk) row[tk] = 0.0f;
        if (d.active()) {
          float* rd = probs_dropped + bh * T * T + tq * T;
          attention_dropout_row(drop.data(), d, uint64_t(d.sample_base + b), uint64_t(s.head0 + h), T, tq);
          for (int64_t tk = 0; tk <= tq; ++tk) rd[tk] = row[tk] * drop[tk];
          for (int64_t tk = tq + 1; tk < T; ++tk) rd[tk] = 0.0f;
        }
      }
      const float* Pd = d.active() ? probs_dropped + bh * T * T : P;
      // out[b, :, h] = Pd V
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(T), int(D), int(T), 1.0f, Pd, int(T), v, int(ld), 0.0f,
                  out + b * T * H * D + h * D, int(H * D));
    }
  }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* probs,
                        const float* probs_dropped, const AttentionShape& s, const Dropout& d) {
  const int64_t B = s.B, T = s.T, H = s.H, D = s.D;
  const int64_t ld = H * 3 * D;
  const float scale = 1.0f / std::sqrt(float(D));
#pragma omp parallel
  {
    std::vector<float> dP(T * T);
    std::vector<float> drop(d.active() ? T : 0);
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < B * H; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      const float* q = qkv + b * T * ld + h * 3 * D;
      const float* k = q + D;
      const float* v = q + 2 * D;
      float* dq = dqkv + b * T * ld + h * 3 * D;
      float* dk = dq + D;
      float* dv = dq + 2 * D;
      const float* P = probs + bh * T * T;
      const float* Pd = d.active() ? probs_dropped + bh * T * T : P;
      const float* dy = dout + b * T * H * D + h * D;
      // dPd = dY V^T ; dV = Pd^T dY
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(T), int(T), int(D), 1.0f, dy, int(H * D), v, int(ld),
                  0.0f, dP.data(), int(T));
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(T), int(D), int(T), 1.0f, Pd, int(T), dy, int(H * D),
                  0.0f, dv, int(ld));
      // Through dropout and softmax: dS = P * (dP - sum(dP * P)) * scale.
      for (int64_t tq = 0; tq < T; ++tq) {
        float* g = dP.data() + tq * T;
        const float* p = P + tq * T;
        if (d.active()) {
          attention_dropout_row(drop.data(), d, uint64_t(d.sample_base + b), uint64_t(s.head0 + h), T, tq);
          for (int64_t tk = 0; tk <= tq; ++tk) g[tk] *= drop[tk];
        }
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int64_t tk = 0; tk <= tq; ++tk) dot += g[tk] * p[tk];
#pragma omp simd
        for (int64_t tk = 0; tk <= tq; ++tk) g[tk] = p[tk] * (g[tk] - dot) * scale;
        for (int64_t tk = tq + 1; tk < T; ++tk) g[tk] = 0.0f;
      }
      // dQ = dS K ; dK = dS^T Q
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(T), int(D), int(T), 1.0f, dP.data(), int(T), k, int(ld),
                  0.0f, dq, int(ld));
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(T), int(D), int(T), 1.0f, dP.data(), int(T), q, int(ld),
                  0.0f, dk, int(ld));
    }
  }
}

}  // namespace occ::kernels
