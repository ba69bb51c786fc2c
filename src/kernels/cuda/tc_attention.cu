// Tensor-core causal attention, forward (tc_attention.h), and the host checks
// shared with backward (tc_attention_backward.cu).
//
// Forward (FlashAttention-2): a block owns block_m query rows of one (sample,
// head), each warp 16 * m_tiles of them, and streams key/value tiles of
// block_n rows through double-buffered shared memory (cp.async: tile j + 1
// loads while tile j is multiplied). Per tile and warp: S = Q K^T on tensor
// cores (Q fragments stay in registers for the whole loop), the causal mask
// on tiles that reach the diagonal or past T, an online softmax in the
// log2 domain (exp2 of prescaled scores; the running max and the per-thread
// partial row sums are rescaled when the max grows), dropout from a keep-bit
// tile drawn by the whole block while the next tile loads, and O += P V with
// P rounded to the 16-bit format straight from the accumulator registers.
// Key tiles after a block's last row are never visited; a warp skips the
// products of a tile none of whose keys it sees. The epilogue divides by the
// row sum, applies 1/(1-p) once, rounds O to 16 bits and stores the natural-log
// log-sum-exp of the undropped scaled scores.
#include <cmath>

#include "kernels/cuda/tc_attention.h"
#include "kernels/cuda/tc_mma.cuh"

namespace occ::kernels::cuda {

namespace tc_impl {

TcArgs make_args(const AttentionShape& s, const Dropout& d) {
  TcArgs a{};
  a.s = s;
  a.T = s.T;
  a.H = s.H;
  a.head0 = s.head0;
  a.sample_base = d.sample_base;
  a.drop_key = d.key;
  a.scale = 1.0f / std::sqrt(float(s.D));  // as the CPU computes it
  a.scale_log2 = a.scale * kLog2e;
  a.dropout = d.active();
  a.keep_scale = a.dropout ? 1.0f / (1.0f - d.p) : 1.0f;
  a.out_scale = a.keep_scale;
  a.keep_threshold = a.dropout ? tc::dropout_keep_threshold(d.p) : 0u;
  return a;
}

void check_call(const char* what, const AttentionShape& s, const Dropout& d, Precision format,
                std::initializer_list<const void*> aligned16) {
  if (!tc_attention_supported(s))
    throw_error(std::string(what) + ": unsupported shape B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) +
                " H=" + std::to_string(s.H) + " KV=" + std::to_string(s.kv_heads()) + " D=" + std::to_string(s.D) +
                " (the tensor-core kernels take D 64 or 128, T in [1, 2^22], B, H >= 1; use the fp32 kernels)");
  if (!(d.p >= 0.0f && d.p < 1.0f))
    throw_error(std::string(what) + ": dropout probability " + std::to_string(d.p) + " is outside [0, 1)");
  if (format != Precision::Bf16 && format != Precision::Fp16)
    throw_error(std::string(what) + ": format must be bf16 or fp16, not " + precision_name(format));
  for (const void* p : aligned16)
    if (p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 != 0)
      throw_error(std::string(what) + ": a 16-bit operand is null or not 16-byte aligned (pass cudaMalloc'd "
                                      "buffers or offsets that are multiples of 8 elements)");
}

namespace {

// Forward tile geometry: kWarps warps of 16 * kMt query rows, key tiles of kBlockN.
template <class Elem, int D_, int kWarps_, int kMt_, int kBlockN_>
struct ForwardTile {
  static constexpr int D = D_, kWarps = kWarps_, kMt = kMt_, kBlockN = kBlockN_;
  static constexpr int kRowsPerWarp = 16 * kMt, kBlockM = kWarps * kRowsPerWarp, kThreads = 32 * kWarps;
  static constexpr int kStride = smem_stride(D);
  static constexpr int kKSteps = D / 16;        // k-steps of Q K^T
  static constexpr int kNTiles = kBlockN / 8;   // n-tiles of S
  static constexpr int kPSteps = kBlockN / 16;  // k-steps of P V
  static constexpr int kDTiles = D / 8;         // n-tiles of O
  static constexpr int kMaskWords = kBlockN / 32;
  static constexpr size_t kSmemBytes =
      sizeof(Elem) * size_t(kBlockM + 4 * kBlockN) * kStride + sizeof(uint32_t) * kBlockM * kMaskWords;
  static_assert(kBlockN % 32 == 0 && D % 16 == 0, "tile shape");
  static_assert(kSmemBytes == tc::forward_smem_bytes(int(sizeof(Elem)), D, tc::ForwardShape{kWarps, kMt, kBlockN}),
                "tc_attention_index.h models this layout");
  static_assert(kSmemBytes <= tc::kOptInSharedLimitSm80, "must fit every architecture built");
};

template <class Elem, class F>
__global__ void __launch_bounds__(F::kThreads)
    tc_forward_kernel(Elem* __restrict__ out, float* __restrict__ lse, const Elem* __restrict__ qkv, const TcArgs a) {
  constexpr int D = F::D, S = F::kStride, MT = F::kMt, BM = F::kBlockM, BN = F::kBlockN, W = F::kMaskWords;
  extern __shared__ __align__(16) unsigned char smem[];
  Elem* sQ = reinterpret_cast<Elem*>(smem);        // [BM][S]
  Elem* sK = sQ + BM * S;                          // [2][BN][S]
  Elem* sV = sK + 2 * BN * S;                      // [2][BN][S]
  uint32_t* sMask = reinterpret_cast<uint32_t*>(sV + 2 * BN * S);  // [BM][W]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t T = a.T, H = a.H, b = blockIdx.x / H, h = blockIdx.x % H;
  // The last query blocks have the most key tiles: launch them first.
  const int64_t q0 = int64_t(gridDim.y - 1 - blockIdx.y) * BM;
  const int64_t ld = a.s.qkv_width();
  const Elem* rows = qkv + b * T * ld;  // token 0 of the sample
  const Elem* qhead = rows + a.s.q_offset(h);
  const Elem* khead = rows + a.s.k_offset(a.s.group_of(h));  // the k/v head of h's query group
  const Elem* vhead = rows + a.s.v_offset(a.s.group_of(h));
  const uint64_t sample = uint64_t(a.sample_base + b), head_global = uint64_t(a.head0 + h);
  const int n_tiles = tc::key_tiles_for_queries(q0, BM, T, BN);
  const int64_t warp_first = q0 + warp * F::kRowsPerWarp, warp_last = warp_first + F::kRowsPerWarp - 1;

  load_rows_async<BM, D, F::kThreads>(sQ, qhead, ld, q0, T, tid);
  load_rows_async<BN, D, F::kThreads>(sK, khead, ld, 0, T, tid);
  load_rows_async<BN, D, F::kThreads>(sV, vhead, ld, 0, T, tid);
  cp_async_commit();

  float o[MT][F::kDTiles][4];
  zero(o);
  float row_max[MT][2], row_sum[MT][2];  // per m-tile and row half (rows g, g + 8); max of raw scores
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int rh = 0; rh < 2; ++rh) row_max[mt][rh] = -INFINITY, row_sum[mt][rh] = 0.0f;
  uint32_t qa[MT][F::kKSteps][4];

  for (int j = 0; j < n_tiles; ++j) {
    const int64_t k0 = int64_t(j) * BN;
    const int buf = j & 1;
    if (j + 1 < n_tiles) {  // buffer buf ^ 1 was last read in tile j - 1, before its closing barrier
      load_rows_async<BN, D, F::kThreads>(sK + (buf ^ 1) * BN * S, khead, ld, k0 + BN, T, tid);
      load_rows_async<BN, D, F::kThreads>(sV + (buf ^ 1) * BN * S, vhead, ld, k0 + BN, T, tid);
    }
    cp_async_commit();  // (an empty group on the last tile keeps the wait count uniform)
    // The keep bits of tile j, drawn while the copies are in flight; the mask
    // tile's last readers passed the previous iteration's closing barrier.
    if (a.dropout) fill_keep_mask<BM, W, F::kThreads>(sMask, a, sample, head_global, q0, k0, tid);
    cp_async_wait<1>();  // this thread's copies of tile j (and Q) have landed ...
    __syncthreads();     // ... and everyone's, and the mask tile is written
    if (j == 0) load_a<MT, F::kKSteps>(qa, sQ + warp * F::kRowsPerWarp * S, S, lane);

    if (tc::rows_see_key_tile(warp_last, k0)) {  // warp-uniform
      float s[MT][F::kNTiles][4];
      zero(s);
      gemm_rA_Bnk<Elem, MT, F::kNTiles, F::kKSteps>(s, qa, sK + buf * BN * S, S, lane);
      const bool masked = tc::key_tile_needs_mask(warp_first, k0, BN, T);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int rh = 0; rh < 2; ++rh) {
          const int r = tc::block_row(warp, F::kRowsPerWarp, mt, lane, 2 * rh);
          const int64_t tq = q0 + r;
          float mx = -INFINITY;
#pragma unroll
          for (int nt = 0; nt < F::kNTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              float& x = s[mt][nt][2 * rh + e];
              if (masked && !tc::key_visible(tq, k0 + tc::tile_col(nt, lane, 2 * rh + e), T)) x = -INFINITY;
              mx = fmaxf(mx, x);
            }
          mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));  // the 4 lanes of a quad share the row
          mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 2));
          const float m_new = fmaxf(row_max[mt][rh], mx);
          // Every row sees key 0 in tile 0, so m_new is finite; the guard keeps
          // a row without visible keys at p = 0 instead of NaN.
          const float base = m_new == -INFINITY ? 0.0f : m_new * a.scale_log2;
          const float correction = fast_exp2(row_max[mt][rh] * a.scale_log2 - base);  // 0 on the first tile
          row_max[mt][rh] = m_new;
          row_sum[mt][rh] *= correction;
#pragma unroll
          for (int dt = 0; dt < F::kDTiles; ++dt) {
            o[mt][dt][2 * rh] *= correction;
            o[mt][dt][2 * rh + 1] *= correction;
          }
#pragma unroll
          for (int nt = 0; nt < F::kNTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              float& x = s[mt][nt][2 * rh + e];
              x = fast_exp2(fmaf(x, a.scale_log2, -base));  // masked: exp2(-inf) = 0
              row_sum[mt][rh] += x;                          // the normaliser counts dropped entries too
            }
          if (a.dropout) {
            uint32_t keep[W];
#pragma unroll
            for (int w = 0; w < W; ++w) keep[w] = sMask[r * W + w];
#pragma unroll
            for (int nt = 0; nt < F::kNTiles; ++nt)
#pragma unroll
              for (int e = 0; e < 2; ++e)
                if (!((keep[tc::tile_col_word(nt)] >> tc::tile_col_bit(nt, lane, 2 * rh + e)) & 1u))
                  s[mt][nt][2 * rh + e] = 0.0f;
          }
        }
      uint32_t pa[MT][F::kPSteps][4];
      pack_a<Elem>(pa, s);
      gemm_rA_Bkn<Elem, MT, F::kDTiles, F::kPSteps>(o, pa, sV + buf * BN * S, S, lane);
    }
    __syncthreads();  // tile j's buffers and mask are free for tile j + 2's copies and tile j + 1's bits
  }

#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int rh = 0; rh < 2; ++rh) {
      float l = row_sum[mt][rh];
      l += __shfl_xor_sync(kFullMask, l, 1);
      l += __shfl_xor_sync(kFullMask, l, 2);
      const int64_t tq = q0 + tc::block_row(warp, F::kRowsPerWarp, mt, lane, 2 * rh);
      if (tq >= T) continue;
      const float factor = (l > 0.0f ? 1.0f / l : 0.0f) * a.out_scale;
      Elem* dst = out + (b * T + tq) * H * D + h * D;
#pragma unroll
      for (int dt = 0; dt < F::kDTiles; ++dt)
        store_pair(dst + tc::tile_col(dt, lane, 2 * rh), o[mt][dt][2 * rh] * factor, o[mt][dt][2 * rh + 1] * factor);
      if ((lane & 3) == 0) lse[(b * H + h) * T + tq] = row_max[mt][rh] * a.scale + logf(l);
    }
}

template <class Elem, int D>
void launch_forward(void* out, float* lse, const void* qkv, const TcArgs& a, int64_t B, cudaStream_t stream) {
  constexpr tc::ForwardShape shape = tc::forward_shape(D);
  using F = ForwardTile<Elem, D, shape.warps, shape.m_tiles, shape.block_n>;
  static_assert(kMaxT / F::kBlockM <= 65535, "query blocks must fit gridDim.y");
  static std::atomic<uint64_t> configured{0};
  allow_dynamic_smem(tc_forward_kernel<Elem, F>, F::kSmemBytes, configured);
  const dim3 grid(unsigned(B * a.H), unsigned((a.T + F::kBlockM - 1) / F::kBlockM));
  tc_forward_kernel<Elem, F><<<grid, F::kThreads, F::kSmemBytes, stream>>>(
      static_cast<Elem*>(out), lse, static_cast<const Elem*>(qkv), a);
  OCC_CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace tc_impl

bool tc_attention_supported(const AttentionShape& s) {
  return (s.D == 64 || s.D == 128) && s.T >= 1 && s.T <= tc_impl::kMaxT && s.B >= 1 && s.H >= 1 &&
         s.kv_heads() >= 1 && s.H % s.kv_heads() == 0 && s.B * s.H < (int64_t(1) << 31) &&
         s.B * s.H * s.T < (int64_t(1) << 31) && s.head0 >= 0;
}

int64_t tc_attention_stats_floats(const AttentionShape& s) { return s.B * s.H * s.T; }

void tc_attention_forward(void* out, float* lse, const void* qkv, const AttentionShape& s, const Dropout& d,
                          Precision format, cudaStream_t stream) {
  using namespace tc_impl;
  check_call("tc_attention_forward", s, d, format, {out, qkv});
  if (lse == nullptr) throw_error("tc_attention_forward: lse is null");
  const TcArgs a = make_args(s, d);
  if (format == Precision::Bf16) {
    if (s.D == 64) launch_forward<__nv_bfloat16, 64>(out, lse, qkv, a, s.B, stream);
    else launch_forward<__nv_bfloat16, 128>(out, lse, qkv, a, s.B, stream);
  } else {
    if (s.D == 64) launch_forward<__half, 64>(out, lse, qkv, a, s.B, stream);
    else launch_forward<__half, 128>(out, lse, qkv, a, s.B, stream);
  }
}

}  // namespace occ::kernels::cuda
