// Fused causal attention (flash-attention style, fp32 on CUDA cores): no
// [T, T] matrix in global memory. Forward keeps, per (sample, head, query),
// the log-sum-exp of the scaled scores, and a copy of the output; backward
// recomputes the probabilities tile by tile from them and regenerates the
// dropout mask from Philox, bit-identical to the CPU's attention_dropout_row.
//
// Work split (deterministic: every output element is written by one thread
// that adds in a fixed order; no atomics):
//   forward  : a block owns kRows query rows of one (sample, head) and streams
//              key/value tiles through shared memory with an online softmax;
//   backward : Delta = rowsum(dout * out) first; then one kernel per key block
//              accumulates dK, dV over the queries at or after each key (with
//              grouped-query attention, over every query head of the k/v
//              head's group in turn), and another per query block
//              accumulates dQ over the keys up to it.
// q, k and v sit where kernels.h's AttentionShape says (per query group
// [q of its heads | k | v]); query head h reads k/v head h / group_size.
//
// Each row (query or key) is handled by R = D / 32 consecutive threads of a
// warp, each holding 32 of the D features, so every thread keeps 32-float
// register slices whatever D is. Thread slice r holds the features
// 4 * (R * i + r) + e (i < 8, e < 4): the R threads of a row read adjacent
// 16-byte chunks of a shared-memory row, which avoids bank conflicts.
// Dot products are completed with R-lane shuffles, which every thread of a
// warp executes unconditionally (masked pairs are discarded afterwards).
#include <cmath>

#include "kernels/cuda/common.cuh"

namespace occ::kernels::cuda {

namespace {

template <int D>
struct FlashTile {
  static constexpr int R = D / 32;                // threads per row
  static constexpr int kRows = 64;                // rows owned by a block
  static constexpr int kThreads = kRows * R;
  static constexpr int kTile = 32;                // rows per shared-memory tile of the other operand
  static_assert(D % 32 == 0 && 32 % R == 0, "head dimension must be 32, 64 or 128");
};

// Feature index of element (i, e) of thread slice r.
template <int R>
__device__ __forceinline__ int feature(int i, int e, int r) {
  return 4 * (R * i + r) + e;
}

// Loads a thread's slice of a global row (zeros when the row does not exist).
template <int R>
__device__ __forceinline__ void load_slice(float (&x)[32], const float* row, bool valid, int r) {
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) x[4 * i + e] = valid ? row[feature<R>(i, e, r)] : 0.0f;
}

template <int R>
__device__ __forceinline__ void store_slice(float* row, const float (&x)[32], float factor, int r) {
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) row[feature<R>(i, e, r)] = x[4 * i + e] * factor;
}

// This thread's part of a . row (row in shared memory, 16-byte aligned).
template <int R>
__device__ __forceinline__ float dot_slice(const float (&a)[32], const float* row, int r) {
  float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float4 b = *reinterpret_cast<const float4*>(row + 4 * (R * i + r));
    s0 = fmaf(a[4 * i + 0], b.x, s0);
    s1 = fmaf(a[4 * i + 1], b.y, s1);
    s2 = fmaf(a[4 * i + 2], b.z, s2);
    s3 = fmaf(a[4 * i + 3], b.w, s3);
  }
  return (s0 + s1) + (s2 + s3);
}

// acc += p * row (this thread's slice).
template <int R>
__device__ __forceinline__ void axpy_slice(float (&acc)[32], float p, const float* row, int r) {
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float4 b = *reinterpret_cast<const float4*>(row + 4 * (R * i + r));
    acc[4 * i + 0] = fmaf(p, b.x, acc[4 * i + 0]);
    acc[4 * i + 1] = fmaf(p, b.y, acc[4 * i + 1]);
    acc[4 * i + 2] = fmaf(p, b.z, acc[4 * i + 2]);
    acc[4 * i + 3] = fmaf(p, b.w, acc[4 * i + 3]);
  }
}

// Sum over the R consecutive lanes of a row (all lanes get the same value).
template <int R>
__device__ __forceinline__ float row_sum(float v) {
#pragma unroll
  for (int offset = 1; offset < R; offset <<= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Copies rows row0 .. row0 + kTile - 1 (feature columns col .. col + D - 1 of a
// matrix with row stride ld) into a shared tile, zeros past the last row.
template <int D, int kTile>
__device__ __forceinline__ void load_tile(float (*tile)[D], const float* src, int64_t ld, int64_t row0, int64_t rows) {
  for (int x = threadIdx.x; x < kTile * D; x += blockDim.x) {
    const int j = x / D, c = x % D;
    tile[j][c] = row0 + j < rows ? src[(row0 + j) * ld + c] : 0.0f;
  }
}

struct FlashArgs {
  const float* qkv;
  AttentionShape s;  // offsets of q, k, v within a row (and the row stride)
  int64_t T, H;
  int64_t head0;
  float scale;
  DropoutParams drop;
};

template <int D>
__global__ void __launch_bounds__(FlashTile<D>::kThreads)
    flash_forward_kernel(float* out, float* lse, float* out_saved, FlashArgs a) {
  using F = FlashTile<D>;
  constexpr int R = F::R, kTile = F::kTile;
  __shared__ __align__(16) float Ks[kTile][D];
  __shared__ __align__(16) float Vs[kTile][D];
  const int r = threadIdx.x % R;
  const int64_t T = a.T, b = blockIdx.z, h = blockIdx.y, ld = a.s.qkv_width();
  const int64_t q0 = int64_t(blockIdx.x) * F::kRows, tq = q0 + threadIdx.x / R;
  const int64_t q_last = (q0 + F::kRows < T ? q0 + F::kRows : T) - 1;
  const bool valid = tq < T;
  const float* rows = a.qkv + b * T * ld;  // token 0 of the sample
  const float* qh = rows + a.s.q_offset(h);
  const float* kh = rows + a.s.k_offset(a.s.group_of(h));
  const float* vh = rows + a.s.v_offset(a.s.group_of(h));
  float q[32], acc[32];
  load_slice<R>(q, qh + tq * ld, valid, r);
#pragma unroll
  for (int i = 0; i < 32; ++i) acc[i] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  const uint64_t sample = uint64_t(a.drop.sample_base + b);
  const uint64_t idx_row = (uint64_t(a.head0 + h) * uint64_t(T) + uint64_t(tq)) * uint64_t(T);

  for (int64_t k0 = 0; k0 <= q_last; k0 += kTile) {
    __syncthreads();  // the previous tile is no longer read
    load_tile<D, kTile>(Ks, kh, ld, k0, T);
    load_tile<D, kTile>(Vs, vh, ld, k0, T);
    __syncthreads();
    float s[kTile];
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < kTile; ++j) {
      const float dot = row_sum<R>(dot_slice<R>(q, Ks[j], r));
      s[j] = k0 + j <= tq ? dot * a.scale : -INFINITY;  // causal mask
      tile_max = fmaxf(tile_max, s[j]);
    }
    const float m_new = fmaxf(m, tile_max);
    if (m_new == -INFINITY) continue;  // no key of this tile is visible to this row yet
    const float correction = expf(m - m_new);  // 0 on the first visible tile (m = -inf)
    l *= correction;
#pragma unroll
    for (int i = 0; i < 32; ++i) acc[i] *= correction;
    PhiloxBlock blk{};
#pragma unroll
    for (int j = 0; j < kTile; ++j) {
      if (k0 + j > tq) break;
      const float p = expf(s[j] - m_new);
      l += p;  // the softmax normaliser counts dropped entries too
      float pd = p;
      if (a.drop.active) {
        const uint64_t idx = idx_row + uint64_t(k0 + j);
        if (j == 0 || (idx & 3) == 0) blk = Philox::block(a.drop.key, sample, idx >> 2);
        pd = p * dropout_multiplier(philox_word(blk, int(idx & 3)), a.drop);
      }
      axpy_slice<R>(acc, pd, Vs[j], r);
    }
    m = m_new;
  }
  if (!valid) return;
  const float inv = 1.0f / l;
  const int64_t o = (b * T + tq) * a.H * D + h * D;
  store_slice<R>(out + o, acc, inv, r);
  store_slice<R>(out_saved + o, acc, inv, r);
  if (r == 0) lse[(b * a.H + h) * T + tq] = m + logf(l);
}

// delta[b, h, t] = dout[b, t, h, :] . out[b, t, h, :]; one warp per row.
__global__ void flash_delta_kernel(float* delta, const float* dout, const float* out, int64_t B, int64_t T,
                                   int64_t H, int64_t D) {
  const int64_t row = int64_t(blockIdx.x) * (kBlock / 32) + (threadIdx.x >> 5);  // (b * T + t) * H + h
  if (row >= B * T * H) return;
  const int lane = threadIdx.x & 31;
  float s = 0.0f;
  for (int64_t c = lane; c < D; c += 32) s += dout[row * D + c] * out[row * D + c];
  s = warp_sum(s);
  if (lane == 0) {
    const int64_t h = row % H, bt = row / H, t = bt % T, b = bt / T;
    delta[(b * H + h) * T + t] = s;
  }
}

// dQ for kRows query rows: dq = sum_{tk <= tq} dS[tq, tk] k[tk], dS = P (dP' - Delta) scale.
template <int D>
__global__ void __launch_bounds__(FlashTile<D>::kThreads)
    flash_backward_dq_kernel(float* dqkv, const float* dout, const float* lse, const float* delta, FlashArgs a) {
  using F = FlashTile<D>;
  constexpr int R = F::R, kTile = F::kTile;
  __shared__ __align__(16) float Ks[kTile][D];
  __shared__ __align__(16) float Vs[kTile][D];
  const int r = threadIdx.x % R;
  const int64_t T = a.T, b = blockIdx.z, h = blockIdx.y, ld = a.s.qkv_width(), HD = a.H * D;
  const int64_t q0 = int64_t(blockIdx.x) * F::kRows, tq = q0 + threadIdx.x / R;
  const int64_t q_last = (q0 + F::kRows < T ? q0 + F::kRows : T) - 1;
  const bool valid = tq < T;
  const float* rows = a.qkv + b * T * ld;
  const float* kh = rows + a.s.k_offset(a.s.group_of(h));
  const float* vh = rows + a.s.v_offset(a.s.group_of(h));
  float q[32], g[32], dq[32];
  load_slice<R>(q, rows + a.s.q_offset(h) + tq * ld, valid, r);
  load_slice<R>(g, dout + (b * T + tq) * HD + h * D, valid, r);
#pragma unroll
  for (int i = 0; i < 32; ++i) dq[i] = 0.0f;
  const int64_t stat = (b * a.H + h) * T + tq;
  const float L = valid ? lse[stat] : 0.0f, Dl = valid ? delta[stat] : 0.0f;
  const uint64_t sample = uint64_t(a.drop.sample_base + b);
  const uint64_t idx_row = (uint64_t(a.head0 + h) * uint64_t(T) + uint64_t(tq)) * uint64_t(T);

  for (int64_t k0 = 0; k0 <= q_last; k0 += kTile) {
    __syncthreads();
    load_tile<D, kTile>(Ks, kh, ld, k0, T);
    load_tile<D, kTile>(Vs, vh, ld, k0, T);
    __syncthreads();
    PhiloxBlock blk{};
    for (int j = 0; j < kTile; ++j) {
      const float sq = row_sum<R>(dot_slice<R>(q, Ks[j], r));
      const float dp = row_sum<R>(dot_slice<R>(g, Vs[j], r));
      const int64_t tk = k0 + j;
      if (!valid || tk > tq) continue;  // no shuffles below this point
      const float p = expf(sq * a.scale - L);
      float mult = 1.0f;
      if (a.drop.active) {
        const uint64_t idx = idx_row + uint64_t(tk);
        if (j == 0 || (idx & 3) == 0) blk = Philox::block(a.drop.key, sample, idx >> 2);
        mult = dropout_multiplier(philox_word(blk, int(idx & 3)), a.drop);
      }
      const float ds = p * (dp * mult - Dl) * a.scale;
      axpy_slice<R>(dq, ds, Ks[j], r);
    }
  }
  if (valid) store_slice<R>(dqkv + (b * T + tq) * ld + a.s.q_offset(h), dq, 1.0f, r);
}

// dK, dV for kRows key rows of k/v head g: sums over the group's query heads h
// (in order) and their queries tq >= tk of dv += P' dout[tq], dk += dS[tq, tk]
// q[tq] (P' = P through the dropout mask).
template <int D>
__global__ void __launch_bounds__(FlashTile<D>::kThreads)
    flash_backward_dkv_kernel(float* dqkv, const float* dout, const float* lse, const float* delta, FlashArgs a) {
  using F = FlashTile<D>;
  constexpr int R = F::R, kTile = F::kTile;
  __shared__ __align__(16) float Qs[kTile][D];
  __shared__ __align__(16) float Gs[kTile][D];
  __shared__ float Ls[kTile], Ds[kTile];
  const int r = threadIdx.x % R;
  const int64_t T = a.T, b = blockIdx.z, g = blockIdx.y, ld = a.s.qkv_width(), HD = a.H * D;
  const int64_t k_first = int64_t(blockIdx.x) * F::kRows, tk = k_first + threadIdx.x / R;
  const bool valid = tk < T;
  const float* rows = a.qkv + b * T * ld;
  float k[32], v[32], dk[32], dv[32];
  load_slice<R>(k, rows + a.s.k_offset(g) + tk * ld, valid, r);
  load_slice<R>(v, rows + a.s.v_offset(g) + tk * ld, valid, r);
#pragma unroll
  for (int i = 0; i < 32; ++i) dk[i] = dv[i] = 0.0f;
  const uint64_t sample = uint64_t(a.drop.sample_base + b);
  const int64_t group = a.s.group_size();

  for (int64_t h = g * group; h < (g + 1) * group; ++h) {
    const int64_t stat0 = (b * a.H + h) * T;
    const float* qh = rows + a.s.q_offset(h);
    // Queries before k_first see none of this block's keys (k_first is a multiple of kTile).
    for (int64_t q0 = k_first; q0 < T; q0 += kTile) {
      __syncthreads();
      load_tile<D, kTile>(Qs, qh, ld, q0, T);
      load_tile<D, kTile>(Gs, dout + b * T * HD + h * D, HD, q0, T);
      for (int j = threadIdx.x; j < kTile; j += blockDim.x) {
        Ls[j] = q0 + j < T ? lse[stat0 + q0 + j] : 0.0f;
        Ds[j] = q0 + j < T ? delta[stat0 + q0 + j] : 0.0f;
      }
      __syncthreads();
      for (int j = 0; j < kTile; ++j) {
        const float sq = row_sum<R>(dot_slice<R>(k, Qs[j], r));
        const float dp = row_sum<R>(dot_slice<R>(v, Gs[j], r));
        const int64_t tq = q0 + j;
        if (!valid || tq < tk || tq >= T) continue;  // no shuffles below this point
        const float p = expf(sq * a.scale - Ls[j]);
        float mult = 1.0f;
        if (a.drop.active) {
          // Consecutive queries are T apart in the stream: one Philox block per pair.
          const uint64_t idx = (uint64_t(a.head0 + h) * uint64_t(T) + uint64_t(tq)) * uint64_t(T) + uint64_t(tk);
          mult = dropout_multiplier(philox_word(Philox::block(a.drop.key, sample, idx >> 2), int(idx & 3)), a.drop);
        }
        axpy_slice<R>(dv, p * mult, Gs[j], r);
        const float ds = p * (dp * mult - Ds[j]) * a.scale;
        axpy_slice<R>(dk, ds, Qs[j], r);
      }
    }
  }
  if (!valid) return;
  store_slice<R>(dqkv + (b * T + tk) * ld + a.s.k_offset(g), dk, 1.0f, r);
  store_slice<R>(dqkv + (b * T + tk) * ld + a.s.v_offset(g), dv, 1.0f, r);
}

// Blocks of kRows rows (queries, or keys) x `heads` (query heads, or k/v heads) x samples.
template <int D>
dim3 flash_grid(const AttentionShape& s, int64_t heads) {
  if (heads > 65535 || s.B > 65535) throw_error("fused attention: more than 65535 heads or samples per call");
  return dim3(unsigned((s.T + FlashTile<D>::kRows - 1) / FlashTile<D>::kRows), unsigned(heads), unsigned(s.B));
}

template <int D>
void flash_forward(cudaStream_t stream, float* out, float* saved, const FlashArgs& a, const AttentionShape& s) {
  float* lse = saved;
  float* out_saved = saved + s.B * s.H * s.T;
  flash_forward_kernel<D><<<flash_grid<D>(s, s.H), FlashTile<D>::kThreads, 0, stream>>>(out, lse, out_saved, a);
  OCC_CUDA_CHECK_LAUNCH();
}

template <int D>
void flash_backward(cudaStream_t stream, float* dqkv, const float* dout, const float* lse, const float* delta,
                    const FlashArgs& a, const AttentionShape& s) {
  flash_backward_dkv_kernel<D>
      <<<flash_grid<D>(s, s.kv_heads()), FlashTile<D>::kThreads, 0, stream>>>(dqkv, dout, lse, delta, a);
  OCC_CUDA_CHECK_LAUNCH();
  flash_backward_dq_kernel<D><<<flash_grid<D>(s, s.H), FlashTile<D>::kThreads, 0, stream>>>(dqkv, dout, lse, delta, a);
  OCC_CUDA_CHECK_LAUNCH();
}

FlashArgs flash_args(const float* qkv, const AttentionShape& s, const Dropout& d) {
  return FlashArgs{qkv, s, s.T, s.H, s.head0, 1.0f / std::sqrt(float(s.D)), dropout_params(d)};
}

}  // namespace

void CudaOps::attention_forward_fused(float* out, float* saved, const float* qkv, const AttentionShape& s,
                                      const Dropout& d) {
  const FlashArgs a = flash_args(qkv, s, d);
  switch (s.D) {
    case 32: flash_forward<32>(stream_, out, saved, a, s); break;
    case 64: flash_forward<64>(stream_, out, saved, a, s); break;
    case 128: flash_forward<128>(stream_, out, saved, a, s); break;
    default: throw_error("fused attention: unsupported head dimension " + std::to_string(s.D));
  }
}

void CudaOps::attention_backward_fused(float* dqkv, const float* dout, const float* qkv, const float* saved,
                                       const AttentionShape& s, const Dropout& d) {
  const FlashArgs a = flash_args(qkv, s, d);
  const float* lse = saved;
  const float* out_saved = saved + s.B * s.H * s.T;
  const int64_t rows = s.B * s.T * s.H;
  float* delta = static_cast<float*>(scratch(sizeof(float) * size_t(rows)));
  flash_delta_kernel<<<unsigned((rows + kBlock / 32 - 1) / (kBlock / 32)), kBlock, 0, stream_>>>(
      delta, dout, out_saved, s.B, s.T, s.H, s.D);
  OCC_CUDA_CHECK_LAUNCH();
  switch (s.D) {
    case 32: flash_backward<32>(stream_, dqkv, dout, lse, delta, a, s); break;
    case 64: flash_backward<64>(stream_, dqkv, dout, lse, delta, a, s); break;
    case 128: flash_backward<128>(stream_, dqkv, dout, lse, delta, a, s); break;
    default: throw_error("fused attention: unsupported head dimension " + std::to_string(s.D));
  }
}

}  // namespace occ::kernels::cuda
