#pragma once
// LayerNorm with the row in registers (row_groups.cuh), 16-byte packs, for a
// storage type S; the forward optionally fused with the bias-dropout-add that
// produces its input, the backward with the dropout gradient that follows it.
// Formulas are kernels/layernorm.cpp's, term for term (two-pass mean and
// variance, the same products in the same order); only the order of the row
// and column sums differs (fixed, see row_groups.cuh). With `rms` the same
// kernels are RMSNorm (kernels/layernorm.cpp rmsnorm_*): the mean is 0 (not
// computed, not stored), there is no bias, and the input gradient drops the
// mean term; every other product is LayerNorm's with m = 0, as on the CPU.
#include "kernels/cuda/row_groups.cuh"

namespace occ::kernels::cuda {

// ---- forward --------------------------------------------------------------------------
template <class S, class X>
struct LayerNormForwardArgs {
  S* residual_out;  // fused: residual + dropout(x + bias) rounded to p; nullptr: LayerNorm of `inp`
  S* out;           // LayerNorm(...) rounded to p
  float *mean, *rstd;
  const S* inp;  // fused: the residual
  const X* x;    // fused: the branch (X: S, or fp32 from a TP all-reduce)
  const S* bias;  // fused, nullptr: none
  const S *w, *b;  // b: LayerNorm's bias (null with rms)
  DropoutParams d;
  int64_t N, T, C;
  float eps;
  Precision p;
  bool rms;  // RMSNorm
};

// Groups take rows blockIdx.x * groups + group, then a grid's worth further on.
template <class S, class X, int P>
__global__ void layernorm_forward_rows_kernel(LayerNormForwardArgs<S, X> a, int warps) {
  constexpr int V = kPack<S>;
  const GroupThread g = group_thread(warps);
  const int groups = int(blockDim.x) / g.size;
  const int64_t row_packs = a.C / V;
  for (int64_t base = int64_t(blockIdx.x) * groups; base < a.N; base += int64_t(gridDim.x) * groups) {
    const int64_t n = base + g.group;  // the loop is uniform over the block; rows past N only join the sums
    const bool row = n < a.N;
    float v[P][V];
    float sum[1] = {0.0f};
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const int64_t pk = g.t + int64_t(i) * g.size, at = n * a.C + pk * V;
#pragma unroll
      for (int j = 0; j < V; ++j) v[i][j] = 0.0f;
      if (!row || pk >= row_packs) continue;
      load_values<V>(a.inp + at, v[i]);
      if (a.residual_out) {
        float xv[V], bv[V], m[V];
        load_values<V>(a.x + at, xv);
        if (a.bias) {
          load_values<V>(a.bias + pk * V, bv);
        } else {
#pragma unroll
          for (int j = 0; j < V; ++j) bv[j] = 0.0f;
        }
        row_dropout_multipliers<V>(a.d, n, pk * V, a.T, a.C, m);
#pragma unroll
        for (int j = 0; j < V; ++j) {  // elementwise.cu's bias-dropout-add, then stored as p
          const float r = a.d.active ? v[i][j] + (xv[j] + bv[j]) * m[j] : v[i][j] + xv[j] + bv[j];
          v[i][j] = stored_value<S>(r, a.p);
        }
        store_values<V>(a.residual_out + at, v[i]);
      }
#pragma unroll
      for (int j = 0; j < V; ++j) sum[0] += v[i][j];
    }
    if (!a.rms) group_sum(sum, warps);  // (a.rms is uniform over the grid)
    const float m = a.rms ? 0.0f : sum[0] / float(a.C);
    float var[1] = {0.0f};
#pragma unroll
    for (int i = 0; i < P; ++i) {
      if (g.t + int64_t(i) * g.size >= row_packs) continue;  // (rows past N hold zeros: harmless)
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float dx = v[i][j] - m;
        var[0] += dx * dx;
      }
    }
    group_sum(var, warps);
    const float s = 1.0f / sqrtf(var[0] / float(a.C) + a.eps);
    if (!row) continue;
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const int64_t pk = g.t + int64_t(i) * g.size;
      if (pk >= row_packs) continue;
      float wv[V], bv[V], y[V];
      load_values<V>(a.w + pk * V, wv);
      if (a.b) {
        load_values<V>(a.b + pk * V, bv);
#pragma unroll
        for (int j = 0; j < V; ++j) y[j] = stored_value<S>((v[i][j] - m) * s * wv[j] + bv[j], a.p);
      } else {  // RMSNorm: x s w
#pragma unroll
        for (int j = 0; j < V; ++j) y[j] = stored_value<S>(v[i][j] * s * wv[j], a.p);
      }
      store_values<V>(a.out + n * a.C + pk * V, y);
    }
    if (g.t == 0) {
      if (a.mean) a.mean[n] = m;
      a.rstd[n] = s;
    }
  }
}

// ---- backward ---------------------------------------------------------------------------
template <class S>
struct LayerNormBackwardArgs {
  S* dinp;         // += LayerNorm's input gradient, rounded to p (nullptr: not wanted)
  S* dx;           // fused: dropout'(the new dinp) rounded to p (nullptr: none)
  float* partial;  // [K][gridDim.x][C] the blocks' column sums (nullptr: no parameter gradient wanted)
  const S *dout, *inp, *w;
  const float *mean, *rstd;  // mean: null with rms
  DropoutParams d;
  int64_t N, T, C, rows_per_group;
  Precision p;
  bool rms;  // RMSNorm: m = 0, no mean term in the input gradient
};

// Group `group` of block b takes the rows_per_group rows from
// (b * groups + group) * rows_per_group on. Column sums: k = 0: dw (dy * xhat),
// 1: db (dy), 2 (K == 3): dbias (dx before rounding).
template <class S, int P, int K>
__global__ void layernorm_backward_rows_kernel(LayerNormBackwardArgs<S> a, int warps) {
  extern __shared__ float4 stage_words[];  // float4: 16-byte aligned for the pack stores
  constexpr int V = kPack<S>;
  const GroupThread g = group_thread(warps);
  const int groups = int(blockDim.x) / g.size;
  const int64_t row_packs = a.C / V;
  float acc[K][P][V];
#pragma unroll
  for (int k = 0; k < K; ++k)
#pragma unroll
    for (int i = 0; i < P; ++i)
#pragma unroll
      for (int j = 0; j < V; ++j) acc[k][i][j] = 0.0f;

  const int64_t first = (int64_t(blockIdx.x) * groups + g.group) * a.rows_per_group;
  for (int64_t r = 0; r < a.rows_per_group; ++r) {  // uniform over the block (group_sum's barriers)
    const int64_t n = first + r;
    const bool row = n < a.N;
    const float m = row && !a.rms ? a.mean[n] : 0.0f, s = row ? a.rstd[n] : 0.0f;
    float dy[P][V], xhat[P][V];
    float sums[2] = {0.0f, 0.0f};  // sum of g = dy * w, sum of g * xhat
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const int64_t pk = g.t + int64_t(i) * g.size, at = n * a.C + pk * V;
#pragma unroll
      for (int j = 0; j < V; ++j) dy[i][j] = xhat[i][j] = 0.0f;
      if (!row || pk >= row_packs) continue;
      float xv[V], wv[V];
      load_values<V>(a.dout + at, dy[i]);
      load_values<V>(a.inp + at, xv);
      load_values<V>(a.w + pk * V, wv);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float xm = xv[j] - m, gw = dy[i][j] * wv[j];
        sums[0] += gw;
        sums[1] += gw * xm * s;
        acc[0][i][j] += dy[i][j] * xm * s;
        acc[1][i][j] += dy[i][j];
        xhat[i][j] = xm * s;
      }
    }
    if (!a.dinp) continue;  // uniform: a kernel argument
    group_sum(sums, warps);
    const float sum_g = a.rms ? 0.0f : sums[0] / float(a.C), sum_gx = sums[1] / float(a.C);
    if (!row) continue;
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const int64_t pk = g.t + int64_t(i) * g.size, at = n * a.C + pk * V;
      if (pk >= row_packs) continue;
      float wv[V], o[V];
      load_values<V>(a.w + pk * V, wv);
      load_values<V>(a.dinp + at, o);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float gw = a.rms ? dy[i][j] * wv[j] : dy[i][j] * wv[j] - sum_g;  // RMSNorm: no mean term
        o[j] = stored_value<S>(o[j] + s * (gw - xhat[i][j] * sum_gx), a.p);
      }
      store_values<V>(a.dinp + at, o);
      if (!a.dx) continue;
      float mult[V];
      row_dropout_multipliers<V>(a.d, n, pk * V, a.T, a.C, mult);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float dxv = a.d.active ? o[j] * mult[j] : o[j];  // inactive: a copy
        if constexpr (K == 3) acc[2][i][j] += dxv;
        o[j] = stored_value<S>(dxv, a.p);
      }
      store_values<V>(a.dx + at, o);
    }
  }
  if (a.partial)
    store_block_column_partials<K, P, V>(a.partial, acc, g, a.C, groups, reinterpret_cast<float*>(stage_words));
}

}  // namespace occ::kernels::cuda
