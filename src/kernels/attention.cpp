#include <cblas.h>

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "kernels/cpu_gemm.h"
#include "kernels/fast_math.h"
#include "kernels/kernels.h"

namespace occ::kernels {

// Each (sample, head) pair is an independent T x T problem; OpenMP spreads the
// pairs over threads and each GEMM inside runs single-threaded (oneDNN and
// OpenBLAS built with OpenMP do not nest). In --bf16 q, k, v and dy hold bf16
// values, so QK^T and dY V^T multiply in bf16 where the CPU can (s.operands,
// cpu_gemm.h); the probabilities and dS are fp32, so their products stay fp32
// (the GPU's kernels round them to bf16: tc_attention.h).

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
  const int64_t ld = s.qkv_width();  // row stride of qkv
  const float scale = 1.0f / std::sqrt(float(D));
#pragma omp parallel
  {
    std::vector<float> drop(d.active() ? T : 0);
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < B * H; ++bh) {
      const int64_t b = bh / H, h = bh % H, g = s.group_of(h);
      const float* q = qkv + b * T * ld + s.q_offset(h);
      const float* k = qkv + b * T * ld + s.k_offset(g);
      const float* v = qkv + b * T * ld + s.v_offset(g);
      float* P = probs + bh * T * T;
      // P = scale * Q K^T (the upper triangle is overwritten by the mask below).
      gemm({false, true, T, T, D, scale, q, ld, k, ld, 0.0f, P, T}, s.operands);
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
      gemm({false, false, T, D, T, 1.0f, Pd, T, v, ld, 0.0f, out + b * T * H * D + h * D, H * D});
    }
  }
}

void attention_decode(float* out, const float* qkv, int64_t n, const AttentionShape& s) {
  const int64_t H = s.H, D = s.D, ld = s.qkv_width();
  const float scale = 1.0f / std::sqrt(float(D));
  std::vector<float> p(static_cast<size_t>(n));
  for (int64_t h = 0; h < H; ++h) {
    const int64_t g = s.group_of(h);
    const float* q = qkv + (n - 1) * ld + s.q_offset(h);
    // p = scale * K q, softmax over the n positions, out_h = V^T p.
    cblas_sgemv(CblasRowMajor, CblasNoTrans, int(n), int(D), scale, qkv + s.k_offset(g), int(ld), q, 1, 0.0f,
                p.data(), 1);
    float mx = -INFINITY;
    for (int64_t j = 0; j < n; ++j) mx = p[size_t(j)] > mx ? p[size_t(j)] : mx;
    float sum = 0.0f;
    for (int64_t j = 0; j < n; ++j) sum += p[size_t(j)] = fast_exp(p[size_t(j)] - mx);
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < n; ++j) p[size_t(j)] *= inv;
    cblas_sgemv(CblasRowMajor, CblasTrans, int(n), int(D), 1.0f, qkv + s.v_offset(g), int(ld), p.data(), 1, 0.0f,
                out + h * D, 1);
  }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* probs,
                        const float* probs_dropped, const AttentionShape& s, const Dropout& d) {
  const int64_t B = s.B, T = s.T, H = s.H, D = s.D, G = s.kv_heads(), r = s.group_size();
  const int64_t ld = s.qkv_width();
  const float scale = 1.0f / std::sqrt(float(D));
  // One task per (sample, k/v head): its group's query heads in order, so that
  // dK and dV sum over them in a fixed order (without GQA a group is one head).
#pragma omp parallel
  {
    std::vector<float> dP(T * T);
    std::vector<float> drop(d.active() ? T : 0);
#pragma omp for schedule(static)
    for (int64_t bg = 0; bg < B * G; ++bg) {
      const int64_t b = bg / G, g = bg % G;
      const float* k = qkv + b * T * ld + s.k_offset(g);
      const float* v = qkv + b * T * ld + s.v_offset(g);
      float* dk = dqkv + b * T * ld + s.k_offset(g);
      float* dv = dqkv + b * T * ld + s.v_offset(g);
      for (int64_t j = 0; j < r; ++j) {
        const int64_t h = g * r + j, bh = b * H + h;
        const float beta = j == 0 ? 0.0f : 1.0f;  // the group's first head writes dK, dV; the others add
        const float* q = qkv + b * T * ld + s.q_offset(h);
        float* dq = dqkv + b * T * ld + s.q_offset(h);
        const float* P = probs + bh * T * T;
        const float* Pd = d.active() ? probs_dropped + bh * T * T : P;
        const float* dy = dout + b * T * H * D + h * D;
        // dPd = dY V^T ; dV (+)= Pd^T dY
        gemm({false, true, T, T, D, 1.0f, dy, H * D, v, ld, 0.0f, dP.data(), T}, s.operands);
        gemm({true, false, T, D, T, 1.0f, Pd, T, dy, H * D, beta, dv, ld});
        // Through dropout and softmax: dS = P * (dP - sum(dP * P)) * scale.
        for (int64_t tq = 0; tq < T; ++tq) {
          float* gr = dP.data() + tq * T;
          const float* p = P + tq * T;
          if (d.active()) {
            attention_dropout_row(drop.data(), d, uint64_t(d.sample_base + b), uint64_t(s.head0 + h), T, tq);
            for (int64_t tk = 0; tk <= tq; ++tk) gr[tk] *= drop[tk];
          }
          float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
          for (int64_t tk = 0; tk <= tq; ++tk) dot += gr[tk] * p[tk];
#pragma omp simd
          for (int64_t tk = 0; tk <= tq; ++tk) gr[tk] = p[tk] * (gr[tk] - dot) * scale;
          for (int64_t tk = tq + 1; tk < T; ++tk) gr[tk] = 0.0f;
        }
        // dQ = dS K ; dK (+)= dS^T Q
        gemm({false, false, T, D, T, 1.0f, dP.data(), T, k, ld, 0.0f, dq, ld});
        gemm({true, false, T, D, T, 1.0f, dP.data(), T, q, ld, beta, dk, ld});
      }
    }
  }
}

// ---- RoPE ---------------------------------------------------------------------------------
void rope_table(float* table, int64_t T, int64_t rotary_dim, double base) {
  const int64_t half = rotary_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double w = std::pow(base, -2.0 * double(i) / double(rotary_dim));
    for (int64_t t = 0; t < T; ++t) {
      const double a = double(t) * w;
      table[t * half + i] = float(std::cos(a));
      table[T * half + t * half + i] = float(std::sin(a));
    }
  }
}

namespace {
// Rotates the first rotary_dim features of the q and k heads of every row by
// +angle (forward) or -angle (backward, sign = -1).
void rope_rotate(float* qkv, const float* table, int64_t table_T, const AttentionShape& s, int64_t rotary_dim,
                 float sign) {
  const int64_t N = s.B * s.T, T = s.T, ld = s.qkv_width(), half = rotary_dim / 2;
  const int64_t G = s.kv_heads(), r = s.group_size();
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = n % T;
    const float* cs = table + t * half;
    const float* sn = table + table_T * half + t * half;
    for (int64_t g = 0; g < G; ++g) {
      // The group's query heads and its k head lie side by side: r + 1 heads from q_offset(g r).
      for (int64_t j = 0; j <= r; ++j) {
        float* x = qkv + n * ld + s.q_offset(g * r) + j * s.D;
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {
          const float x1 = x[i], x2 = x[i + half], c = cs[i], si = sign * sn[i];
          x[i] = x1 * c - x2 * si;
          x[i + half] = x2 * c + x1 * si;
        }
      }
    }
  }
}
}  // namespace

void rope_forward(float* qkv, const float* table, int64_t table_T, const AttentionShape& s, int64_t rotary_dim) {
  rope_rotate(qkv, table, table_T, s, rotary_dim, 1.0f);
}

// y = R x with R orthogonal: dx = R^T dy, the rotation by the opposite angle.
void rope_backward(float* dqkv, const float* table, int64_t table_T, const AttentionShape& s, int64_t rotary_dim) {
  rope_rotate(dqkv, table, table_T, s, rotary_dim, -1.0f);
}

}  // namespace occ::kernels
