// Tensor-core causal attention, backward (tc_attention.h).
//
// Three launches on the stream, none with atomics, so every gradient element
// is summed by one thread in a fixed order (bit-for-bit repeatable):
//   delta: Delta[b, h, t] = dout . out over D (fp32 from the 16-bit tensors);
//   dK/dV: a block owns 16 keys per warp of one k/v head and walks, for each
//          query head of its group in turn (one head without grouped-query
//          attention), the query tiles at or after its first key, recomputing
//          per tile the transposed scores
//          S^T = K Q^T, P^T = exp2(S^T scale log2e - lse log2e), dP^T = V dO^T,
//          then dV += (P o keep)^T dO and dK += dS^T Q with
//          dS = P o (dP o M - Delta) (M: 0 or 1/(1-p)); 1/(1-p) and the softmax
//          scale are applied once to the sums;
//   dQ:    a block owns 16 query rows per warp and walks the key tiles up to its
//          last row: S = Q K^T, dP = dO V^T, the same dS, dQ += dS K.
// P and dS are rounded to the 16-bit format for their products, straight from
// the accumulator registers; the dropout keep bits are drawn again from Philox
// for every tile (the same function forward uses), never stored.
#include <cmath>

#include "kernels/cuda/tc_attention.h"
#include "kernels/cuda/tc_mma.cuh"

namespace occ::kernels::cuda {

namespace tc_impl {
namespace {

// delta[b, h, t] = dout[b*T + t, h, :] . out[b*T + t, h, :]; one warp per row.
template <class Elem>
__global__ void tc_delta_kernel(float* __restrict__ delta, const Elem* __restrict__ dout,
                                const Elem* __restrict__ out, int64_t rows, int64_t T, int64_t H, int D) {
  const int64_t row = int64_t(blockIdx.x) * (kBlock / 32) + (threadIdx.x >> 5);  // (b * T + t) * H + h
  if (row >= rows) return;
  const int lane = threadIdx.x & 31;
  float sum = 0.0f;
  for (int c = 2 * lane; c < D; c += 64) {
    const float2 g = load_pair(dout + row * D + c), y = load_pair(out + row * D + c);
    sum = fmaf(g.x, y.x, sum);
    sum = fmaf(g.y, y.y, sum);
  }
  sum = warp_sum(sum);
  if (lane == 0) {
    const int64_t h = row % H, bt = row / H, t = bt % T, b = bt / T;
    delta[(b * H + h) * T + t] = sum;
  }
}

// dQ tile geometry: kWarps warps of 16 query rows, key tiles of kBlockN.
template <class Elem, int D_, int kWarps_, int kBlockN_>
struct DqTile {
  static constexpr int D = D_, kWarps = kWarps_, kBlockN = kBlockN_;
  static constexpr int kBlockM = 16 * kWarps, kThreads = 32 * kWarps, kStride = smem_stride(D);
  static constexpr int kKSteps = D / 16, kNTiles = kBlockN / 8, kPSteps = kBlockN / 16, kDTiles = D / 8;
  static constexpr int kMaskWords = kBlockN / 32;
  static constexpr size_t kSmemBytes =
      sizeof(Elem) * size_t(2 * kBlockM + 4 * kBlockN) * kStride + sizeof(uint32_t) * kBlockM * kMaskWords;
  static_assert(kBlockN % 32 == 0 && D % 16 == 0, "tile shape");
  static_assert(kSmemBytes == tc::dq_smem_bytes(int(sizeof(Elem)), D, tc::DqShape{kWarps, kBlockN}),
                "tc_attention_index.h models this layout");
  static_assert(kSmemBytes <= tc::kOptInSharedLimitSm80, "must fit every architecture built");
};

template <class Elem, class F>
__global__ void __launch_bounds__(F::kThreads)
    tc_dq_kernel(Elem* __restrict__ dqkv, const Elem* __restrict__ dout, const Elem* __restrict__ qkv,
                 const float* __restrict__ lse, const float* __restrict__ delta, const TcArgs a) {
  constexpr int D = F::D, S = F::kStride, BM = F::kBlockM, BN = F::kBlockN, W = F::kMaskWords;
  extern __shared__ __align__(16) unsigned char smem[];
  Elem* sQ = reinterpret_cast<Elem*>(smem);  // [BM][S]
  Elem* sdO = sQ + BM * S;                   // [BM][S]
  Elem* sK = sdO + BM * S;                   // [2][BN][S]
  Elem* sV = sK + 2 * BN * S;                // [2][BN][S]
  uint32_t* sMask = reinterpret_cast<uint32_t*>(sV + 2 * BN * S);  // [BM][W]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t T = a.T, H = a.H, b = blockIdx.x / H, h = blockIdx.x % H;
  const int64_t q0 = int64_t(gridDim.y - 1 - blockIdx.y) * BM;  // most work first
  const int64_t ld = a.s.qkv_width(), ldo = H * D;
  const Elem* rows = qkv + b * T * ld;
  const Elem* qhead = rows + a.s.q_offset(h);
  const Elem* khead = rows + a.s.k_offset(a.s.group_of(h));
  const Elem* vhead = rows + a.s.v_offset(a.s.group_of(h));
  const Elem* dhead = dout + b * T * ldo + h * D;
  const uint64_t sample = uint64_t(a.sample_base + b), head_global = uint64_t(a.head0 + h);
  const int n_tiles = tc::key_tiles_for_queries(q0, BM, T, BN);
  const int64_t warp_first = q0 + 16 * warp, warp_last = warp_first + 15;

  load_rows_async<BM, D, F::kThreads>(sQ, qhead, ld, q0, T, tid);
  load_rows_async<BM, D, F::kThreads>(sdO, dhead, ldo, q0, T, tid);
  load_rows_async<BN, D, F::kThreads>(sK, khead, ld, 0, T, tid);
  load_rows_async<BN, D, F::kThreads>(sV, vhead, ld, 0, T, tid);
  cp_async_commit();

  // This thread's two rows (g and g + 8 of the warp's 16): log2-domain lse and Delta.
  float lse2[2], row_delta[2];
#pragma unroll
  for (int rh = 0; rh < 2; ++rh) {
    const int64_t tq = q0 + tc::block_row(warp, 16, 0, lane, 2 * rh);
    const int64_t stat = (b * H + h) * T + tq;
    lse2[rh] = tq < T ? lse[stat] * kLog2e : 0.0f;
    row_delta[rh] = tq < T ? delta[stat] : 0.0f;
  }
  float dq[1][F::kDTiles][4];
  zero(dq);

  for (int j = 0; j < n_tiles; ++j) {
    const int64_t k0 = int64_t(j) * BN;
    const int buf = j & 1;
    if (j + 1 < n_tiles) {
      load_rows_async<BN, D, F::kThreads>(sK + (buf ^ 1) * BN * S, khead, ld, k0 + BN, T, tid);
      load_rows_async<BN, D, F::kThreads>(sV + (buf ^ 1) * BN * S, vhead, ld, k0 + BN, T, tid);
    }
    cp_async_commit();
    if (a.dropout) fill_keep_mask<BM, W, F::kThreads>(sMask, a, sample, head_global, q0, k0, tid);
    cp_async_wait<1>();
    __syncthreads();

    if (tc::rows_see_key_tile(warp_last, k0)) {  // warp-uniform
      float s[1][F::kNTiles][4], dp[1][F::kNTiles][4];
      zero(s);
      zero(dp);
      gemm_sA_Bnk<Elem, F::kNTiles, F::kKSteps>(s[0], sQ + 16 * warp * S, sK + buf * BN * S, S, lane);
      gemm_sA_Bnk<Elem, F::kNTiles, F::kKSteps>(dp[0], sdO + 16 * warp * S, sV + buf * BN * S, S, lane);
      const bool masked = tc::key_tile_needs_mask(warp_first, k0, BN, T);
#pragma unroll
      for (int rh = 0; rh < 2; ++rh) {
        const int r = tc::block_row(warp, 16, 0, lane, 2 * rh);
        const int64_t tq = q0 + r;
        uint32_t keep[W];
#pragma unroll
        for (int w = 0; w < W; ++w) keep[w] = a.dropout ? sMask[r * W + w] : ~0u;
#pragma unroll
        for (int nt = 0; nt < F::kNTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int reg = 2 * rh + e;
            const bool visible = !masked || tc::key_visible(tq, k0 + tc::tile_col(nt, lane, reg), T);
            const float p = visible ? fast_exp2(fmaf(s[0][nt][reg], a.scale_log2, -lse2[rh])) : 0.0f;
            const bool kept = (keep[tc::tile_col_word(nt)] >> tc::tile_col_bit(nt, lane, reg)) & 1u;
            const float dp_dropped = kept ? dp[0][nt][reg] * a.keep_scale : 0.0f;  // keep_scale is 1 without dropout
            s[0][nt][reg] = p * (dp_dropped - row_delta[rh]);  // dS / scale
          }
      }
      uint32_t ds[1][F::kPSteps][4];
      pack_a<Elem>(ds, s);
      gemm_rA_Bkn<Elem, 1, F::kDTiles, F::kPSteps>(dq, ds, sK + buf * BN * S, S, lane);
    }
    __syncthreads();
  }

#pragma unroll
  for (int rh = 0; rh < 2; ++rh) {
    const int64_t tq = q0 + tc::block_row(warp, 16, 0, lane, 2 * rh);
    if (tq >= T) continue;
    Elem* dst = dqkv + (b * T + tq) * ld + a.s.q_offset(h);
#pragma unroll
    for (int dt = 0; dt < F::kDTiles; ++dt)
      store_pair(dst + tc::tile_col(dt, lane, 2 * rh), dq[0][dt][2 * rh] * a.scale, dq[0][dt][2 * rh + 1] * a.scale);
  }
}

// dK/dV tile geometry: kWarps warps of 16 keys, query tiles of kBlockM.
template <class Elem, int D_, int kWarps_, int kBlockM_>
struct DkvTile {
  static constexpr int D = D_, kWarps = kWarps_, kBlockM = kBlockM_;
  static constexpr int kBlockN = 16 * kWarps, kThreads = 32 * kWarps, kStride = smem_stride(D);
  static constexpr int kKSteps = D / 16, kQTiles = kBlockM / 8, kPSteps = kBlockM / 16, kDTiles = D / 8;
  static constexpr int kMaskWords = kBlockN / 32;
  static constexpr size_t kSmemBytes = sizeof(Elem) * size_t(2 * kBlockN + 4 * kBlockM) * kStride +
                                       sizeof(float) * 4 * kBlockM + sizeof(uint32_t) * kBlockM * kMaskWords;
  static_assert(kBlockN % 32 == 0 && kBlockM % 16 == 0 && D % 16 == 0, "tile shape");
  static_assert(kSmemBytes == tc::dkv_smem_bytes(int(sizeof(Elem)), D, tc::DkvShape{kWarps, kBlockM}),
                "tc_attention_index.h models this layout");
  static_assert(kSmemBytes <= tc::kOptInSharedLimitSm80, "must fit every architecture built");
};

template <class Elem, class F>
__global__ void __launch_bounds__(F::kThreads)
    tc_dkv_kernel(Elem* __restrict__ dqkv, const Elem* __restrict__ dout, const Elem* __restrict__ qkv,
                  const float* __restrict__ lse, const float* __restrict__ delta, const TcArgs a) {
  constexpr int D = F::D, S = F::kStride, BM = F::kBlockM, BN = F::kBlockN, W = F::kMaskWords;
  extern __shared__ __align__(16) unsigned char smem[];
  Elem* sK = reinterpret_cast<Elem*>(smem);  // [BN][S]
  Elem* sV = sK + BN * S;                    // [BN][S]
  Elem* sQ = sV + BN * S;                    // [2][BM][S]
  Elem* sdO = sQ + 2 * BM * S;               // [2][BM][S]
  float* sLse = reinterpret_cast<float*>(sdO + 2 * BM * S);  // [2][BM]
  float* sDelta = sLse + 2 * BM;                              // [2][BM]
  uint32_t* sMask = reinterpret_cast<uint32_t*>(sDelta + 2 * BM);  // [BM][W]: query rows, key bits

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t T = a.T, H = a.H, G = a.s.kv_heads(), b = blockIdx.x / G, g = blockIdx.x % G;
  const int64_t k0 = int64_t(blockIdx.y) * BN;  // the first key blocks have the most query tiles
  const int64_t ld = a.s.qkv_width(), ldo = H * D, group = a.s.group_size();
  const Elem* rows = qkv + b * T * ld;
  const uint64_t sample = uint64_t(a.sample_base + b);
  const int64_t i0 = tc::first_query_tile(k0, BM), span = tc::query_tiles(T, BM) - i0;
  const int64_t steps = tc::dkv_steps(group, span);  // the group's query heads x their query tiles
  const int64_t key_first = k0 + 16 * warp;

  load_rows_async<BN, D, F::kThreads>(sK, rows + a.s.k_offset(g), ld, k0, T, tid);
  load_rows_async<BN, D, F::kThreads>(sV, rows + a.s.v_offset(g), ld, k0, T, tid);
  // Step it's query tile (of query head g * group + dkv_step_head) into buffer buf.
  auto load_query_tile = [&](int buf, int64_t it) {
    const int64_t h = g * group + tc::dkv_step_head(it, span), q0 = tc::dkv_step_tile(it, span, i0) * BM;
    load_rows_async<BM, D, F::kThreads>(sQ + buf * BM * S, rows + a.s.q_offset(h), ld, q0, T, tid);
    load_rows_async<BM, D, F::kThreads>(sdO + buf * BM * S, dout + b * T * ldo + h * D, ldo, q0, T, tid);
    load_floats_async<BM, F::kThreads>(sLse + buf * BM, lse + (b * H + h) * T, q0, T, tid);
    load_floats_async<BM, F::kThreads>(sDelta + buf * BM, delta + (b * H + h) * T, q0, T, tid);
  };
  load_query_tile(0, 0);
  cp_async_commit();

  float dk[1][F::kDTiles][4], dv[1][F::kDTiles][4];
  zero(dk);
  zero(dv);

  for (int64_t it = 0; it < steps; ++it) {
    const int64_t h = g * group + tc::dkv_step_head(it, span), q0 = tc::dkv_step_tile(it, span, i0) * BM;
    const uint64_t head_global = uint64_t(a.head0 + h);
    const int buf = int(it & 1);
    if (it + 1 < steps) load_query_tile(buf ^ 1, it + 1);
    cp_async_commit();
    if (a.dropout) fill_keep_mask<BM, W, F::kThreads>(sMask, a, sample, head_global, q0, k0, tid);
    cp_async_wait<1>();
    __syncthreads();

    if (tc::keys_see_query_tile(key_first, q0, BM, T)) {  // warp-uniform
      // Transposed products: rows are this warp's 16 keys, columns the tile's queries.
      float st[1][F::kQTiles][4], dpt[1][F::kQTiles][4];
      zero(st);
      zero(dpt);
      gemm_sA_Bnk<Elem, F::kQTiles, F::kKSteps>(st[0], sK + 16 * warp * S, sQ + buf * BM * S, S, lane);
      gemm_sA_Bnk<Elem, F::kQTiles, F::kKSteps>(dpt[0], sV + 16 * warp * S, sdO + buf * BM * S, S, lane);
      const bool masked = tc::query_tile_needs_mask(q0, BM, key_first, 16, T);
      const float* tile_lse = sLse + buf * BM;
      const float* tile_delta = sDelta + buf * BM;
#pragma unroll
      for (int nt = 0; nt < F::kQTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int qc = tc::tile_col(nt, lane, e);  // registers e and 2 + e share the column
          const int64_t tq = q0 + qc;
          const float l2 = tile_lse[qc] * kLog2e, dl = tile_delta[qc];
#pragma unroll
          for (int rh = 0; rh < 2; ++rh) {
            const int reg = 2 * rh + e;
            const int kr = tc::block_row(warp, 16, 0, lane, reg);
            const int64_t tk = k0 + kr;
            const bool visible = !masked || (tc::key_visible(tq, tk, T) && tq < T);
            const float p = visible ? fast_exp2(fmaf(st[0][nt][reg], a.scale_log2, -l2)) : 0.0f;
            const bool kept = !a.dropout || tc::mask_bit(sMask, W, qc, kr);
            const float dp_dropped = kept ? dpt[0][nt][reg] * a.keep_scale : 0.0f;
            st[0][nt][reg] = kept ? p : 0.0f;        // (P o keep)^T; 1/(1-p) at the end
            dpt[0][nt][reg] = p * (dp_dropped - dl);  // dS^T / scale
          }
        }
      uint32_t pa[1][F::kPSteps][4], da[1][F::kPSteps][4];
      pack_a<Elem>(pa, st);
      pack_a<Elem>(da, dpt);
      gemm_rA_Bkn<Elem, 1, F::kDTiles, F::kPSteps>(dv, pa, sdO + buf * BM * S, S, lane);
      gemm_rA_Bkn<Elem, 1, F::kDTiles, F::kPSteps>(dk, da, sQ + buf * BM * S, S, lane);
    }
    __syncthreads();  // tile i's buffers and the mask are free for tile i + 2's copies and tile i + 1's bits
  }

#pragma unroll
  for (int rh = 0; rh < 2; ++rh) {
    const int64_t tk = k0 + tc::block_row(warp, 16, 0, lane, 2 * rh);
    if (tk >= T) continue;
    Elem* dst = dqkv + (b * T + tk) * ld;
#pragma unroll
    for (int dt = 0; dt < F::kDTiles; ++dt) {
      const int c = tc::tile_col(dt, lane, 2 * rh);
      store_pair(dst + a.s.k_offset(g) + c, dk[0][dt][2 * rh] * a.scale, dk[0][dt][2 * rh + 1] * a.scale);
      store_pair(dst + a.s.v_offset(g) + c, dv[0][dt][2 * rh] * a.out_scale, dv[0][dt][2 * rh + 1] * a.out_scale);
    }
  }
}

template <class Elem, int D>
void launch_backward(void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse, float* delta,
                     const TcArgs& a, int64_t B, cudaStream_t stream) {
  Elem* g = static_cast<Elem*>(dqkv);
  const Elem* go = static_cast<const Elem*>(dout);
  const Elem* x = static_cast<const Elem*>(qkv);
  const int64_t rows = B * a.T * a.H;
  tc_delta_kernel<Elem><<<unsigned((rows + kBlock / 32 - 1) / (kBlock / 32)), kBlock, 0, stream>>>(
      delta, go, static_cast<const Elem*>(out), rows, a.T, a.H, D);
  OCC_CUDA_CHECK_LAUNCH();

  constexpr tc::DkvShape kv = tc::dkv_shape(D);
  using Fkv = DkvTile<Elem, D, kv.warps, kv.block_m>;
  static_assert(kMaxT / Fkv::kBlockN <= 65535, "key blocks must fit gridDim.y");
  static std::atomic<uint64_t> kv_configured{0};
  allow_dynamic_smem(tc_dkv_kernel<Elem, Fkv>, Fkv::kSmemBytes, kv_configured);
  const dim3 kv_grid(unsigned(B * a.s.kv_heads()), unsigned((a.T + Fkv::kBlockN - 1) / Fkv::kBlockN));
  tc_dkv_kernel<Elem, Fkv><<<kv_grid, Fkv::kThreads, Fkv::kSmemBytes, stream>>>(g, go, x, lse, delta, a);
  OCC_CUDA_CHECK_LAUNCH();

  constexpr tc::DqShape q = tc::dq_shape(D);
  using Fq = DqTile<Elem, D, q.warps, q.block_n>;
  static_assert(kMaxT / Fq::kBlockM <= 65535, "query blocks must fit gridDim.y");
  static std::atomic<uint64_t> q_configured{0};
  allow_dynamic_smem(tc_dq_kernel<Elem, Fq>, Fq::kSmemBytes, q_configured);
  const dim3 q_grid(unsigned(B * a.H), unsigned((a.T + Fq::kBlockM - 1) / Fq::kBlockM));
  tc_dq_kernel<Elem, Fq><<<q_grid, Fq::kThreads, Fq::kSmemBytes, stream>>>(g, go, x, lse, delta, a);
  OCC_CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace tc_impl

size_t tc_attention_backward_scratch_bytes(const AttentionShape& s) {
  const size_t bytes = sizeof(float) * size_t(s.B * s.H * s.T);  // Delta
  return (bytes + 255) / 256 * 256;
}

void tc_attention_backward(void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse,
                           void* scratch, const AttentionShape& s, const Dropout& d, Precision format,
                           cudaStream_t stream) {
  using namespace tc_impl;
  check_call("tc_attention_backward", s, d, format, {dqkv, dout, qkv, out});
  if (lse == nullptr || scratch == nullptr) throw_error("tc_attention_backward: lse or scratch is null");
  if (dqkv == qkv || dqkv == dout || dqkv == out)
    throw_error("tc_attention_backward: dqkv must not alias qkv, dout or out (it is written while they are read)");
  const TcArgs a = make_args(s, d);
  float* delta = static_cast<float*>(scratch);
  if (format == Precision::Bf16) {
    if (s.D == 64) launch_backward<__nv_bfloat16, 64>(dqkv, dout, qkv, out, lse, delta, a, s.B, stream);
    else launch_backward<__nv_bfloat16, 128>(dqkv, dout, qkv, out, lse, delta, a, s.B, stream);
  } else {
    if (s.D == 64) launch_backward<__half, 64>(dqkv, dout, qkv, out, lse, delta, a, s.B, stream);
    else launch_backward<__half, 128>(dqkv, dout, qkv, out, lse, delta, a, s.B, stream);
  }
}

}  // namespace occ::kernels::cuda
