#pragma once
// The index logic of the tensor-core attention kernels (tc_attention.cu) as
// plain OCC_HD functions: which tiles a block visits under the causal mask,
// which (query, key) element each register of an mma fragment holds, where
// each lane points ldmatrix, and the dropout keep bits. The kernels call
// exactly these functions, and tests/unit/test_tc_attention_index.cpp checks
// them on the CPU (no GPU needed): that every causal element is visited once,
// that the fragment layouts agree with the PTX ISA's definition of
// mma.m16n8k16 and ldmatrix, and that the keep bits equal the CPU's
// attention_dropout_row (kernels/attention.cpp).
//
// No CUDA syntax here, so g++ compiles it for the unit tests.
#include <cstddef>
#include <cstdint>

#include "core/rng.h"

namespace occ::kernels::tc {

// ---- block shapes -------------------------------------------------------------------
// Forward: a block owns block_m() query rows, warps * m_tiles * 16 of them, each
// warp 16 * m_tiles consecutive rows; key/value tiles of block_n keys stream
// through shared memory.
struct ForwardShape {
  int warps, m_tiles, block_n;
  constexpr int rows_per_warp() const { return 16 * m_tiles; }
  constexpr int block_m() const { return warps * rows_per_warp(); }
};
// dQ: a block owns warps * 16 query rows (16 per warp) and streams key tiles of block_n.
struct DqShape {
  int warps, block_n;
  constexpr int block_m() const { return warps * 16; }
};
// dK/dV: a block owns warps * 16 keys (16 per warp) and streams query tiles of block_m.
struct DkvShape {
  int warps, block_m;
  constexpr int block_n() const { return warps * 16; }
};

// Head dimension 64: two m-tiles per warp halve the shared-memory traffic per
// mma (each K/V fragment feeds two); 128: one m-tile per warp keeps the output
// accumulator (64 floats per thread) and the scores within the register file.
constexpr ForwardShape forward_shape(int D) { return D == 128 ? ForwardShape{8, 1, 64} : ForwardShape{4, 2, 64}; }
constexpr DqShape dq_shape(int /*D*/) { return DqShape{8, 64}; }
// 128: 32-query tiles, so that dK, dV (2 x 64 floats) and the transposed
// scores and dP (2 x 16) fit in the registers.
constexpr DkvShape dkv_shape(int D) { return D == 128 ? DkvShape{8, 32} : DkvShape{8, 64}; }

// ---- shared memory --------------------------------------------------------------------
// Each kernel's block takes all its shared memory dynamically (no static
// __shared__ arrays), opted in past the default 48 KiB with
// cudaFuncSetAttribute(MaxDynamicSharedMemorySize). Tiles are rows of D 16-bit
// elements padded to smem_stride(D) (bank-conflict-free ldmatrix); the dropout
// keep bits one 32-bit word per row and 32 keys. The byte counts, which the
// kernels' tile types static_assert and the unit tests bound by the smallest
// opt-in limit of the architectures built (sm_80), are:
OCC_HD constexpr int smem_stride(int D) { return D + 8; }
// forward: Q [BM], K and V double-buffered [2][BN] each; mask [BM][BN / 32].
constexpr size_t forward_smem_bytes(int elem_bytes, int D, ForwardShape f) {
  return size_t(elem_bytes) * size_t(f.block_m() + 4 * f.block_n) * size_t(smem_stride(D)) +
         sizeof(uint32_t) * size_t(f.block_m()) * size_t(f.block_n / 32);
}
// dQ: Q and dO [BM] each, K and V double-buffered [2][BN] each; mask [BM][BN / 32].
constexpr size_t dq_smem_bytes(int elem_bytes, int D, DqShape q) {
  return size_t(elem_bytes) * size_t(2 * q.block_m() + 4 * q.block_n) * size_t(smem_stride(D)) +
         sizeof(uint32_t) * size_t(q.block_m()) * size_t(q.block_n / 32);
}
// dK/dV: K and V [BN] each, Q and dO double-buffered [2][BM] each; LSE and Delta
// double-buffered [2][BM] each (fp32); mask [BM][BN / 32].
constexpr size_t dkv_smem_bytes(int elem_bytes, int D, DkvShape kv) {
  return size_t(elem_bytes) * size_t(2 * kv.block_n() + 4 * kv.block_m) * size_t(smem_stride(D)) +
         sizeof(float) * 4 * size_t(kv.block_m) + sizeof(uint32_t) * size_t(kv.block_m) * size_t(kv.block_n() / 32);
}
// The largest dynamic shared memory a block may opt into (cudaDevAttrMaxSharedMemoryPerBlockOptin):
// sm_80 (A100) 163 KiB, sm_90 (H100, H200) 227 KiB.
constexpr size_t kOptInSharedLimitSm80 = size_t(163) << 10, kOptInSharedLimitSm90 = size_t(227) << 10;

// ---- causal tile ranges ------------------------------------------------------------------
// Key tk is visible to query tq when tk <= tq (causal) and the key exists.
// Rows past T are never stored; they still see key 0, so their softmax stays finite.
OCC_HD inline bool key_visible(int64_t tq, int64_t tk, int64_t T) { return tk <= tq && tk < T; }

// Key tiles [0, n) a block of query rows [q0, q0 + rows) visits: up to its last real row.
OCC_HD inline int key_tiles_for_queries(int64_t q0, int rows, int64_t T, int block_n) {
  const int64_t last = (q0 + rows < T ? q0 + rows : T) - 1;
  return int(last / block_n + 1);
}
// Whether some element of rows [row_first, ...] x keys [k0, k0 + block_n) may be
// invisible: the tile reaches past the first row (the diagonal) or past T. When
// false, every element is visible and the kernel skips the mask.
OCC_HD inline bool key_tile_needs_mask(int64_t row_first, int64_t k0, int block_n, int64_t T) {
  return k0 + block_n - 1 > row_first || k0 + block_n > T;
}
// Whether a warp whose last row is row_last sees any key of the tile at k0 (else it skips the tile's mma).
OCC_HD inline bool rows_see_key_tile(int64_t row_last, int64_t k0) { return k0 <= row_last; }

// dK/dV: the query tiles of block_m a block of keys starting at k0 visits are
// [first, ceil(T / block_m)): queries before k0 see none of its keys.
OCC_HD inline int64_t first_query_tile(int64_t k0, int block_m) { return k0 / block_m; }
OCC_HD inline int64_t query_tiles(int64_t T, int block_m) { return (T + block_m - 1) / block_m; }
// Whether some element of keys [key_first, key_first + keys) x queries [q0, q0 + block_m) may be invisible.
OCC_HD inline bool query_tile_needs_mask(int64_t q0, int block_m, int64_t key_first, int keys, int64_t T) {
  return q0 < key_first + keys - 1 || q0 + block_m > T || key_first + keys > T;
}
// Whether keys [key_first, key_first + 16) of a warp meet any visible query of the tile at q0.
OCC_HD inline bool keys_see_query_tile(int64_t key_first, int64_t q0, int block_m, int64_t T) {
  return key_first < T && q0 + block_m - 1 >= key_first;
}

// ---- mma.sync m16n8k16 fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16") ----------
// g = lane / 4, t = lane % 4. The accumulator C (16 x 8, fp32) is 4 registers:
// register i holds row g + 8 * (i / 2), column 2t + i % 2.
OCC_HD inline int frag_c_row(int lane, int reg) { return (lane >> 2) + 8 * (reg >> 1); }
OCC_HD inline int frag_c_col(int lane, int reg) { return 2 * (lane & 3) + (reg & 1); }

// Scores become the A operand of the next product without leaving registers
// (FlashAttention-2): A register `reg` (two 16-bit halves) of k-step kk is
// built from accumulator n-tile a_from_c_tile(kk, reg), registers
// a_from_c_reg(reg, 0) (low half) and a_from_c_reg(reg, 1) (high half).
OCC_HD inline int a_from_c_tile(int kk, int reg) { return 2 * kk + (reg >> 1); }
OCC_HD inline int a_from_c_reg(int reg, int half) { return 2 * (reg & 1) + half; }

// Element coordinates of accumulator register `reg` of m-tile mt, n-tile nt:
// the row within the block (rows_per_warp rows per warp) and the column within the tile.
OCC_HD inline int block_row(int warp, int rows_per_warp, int mt, int lane, int reg) {
  return warp * rows_per_warp + 16 * mt + frag_c_row(lane, reg);
}
OCC_HD inline int tile_col(int nt, int lane, int reg) { return 8 * nt + frag_c_col(lane, reg); }
// Where tile_col(nt, lane, reg) sits in a mask row of 32-column words: an
// n-tile's 8 columns never straddle a word, so the word depends on nt alone
// (a compile-time index in the unrolled kernels).
OCC_HD inline int tile_col_word(int nt) { return nt >> 2; }
OCC_HD inline int tile_col_bit(int nt, int lane, int reg) { return 8 * (nt & 3) + frag_c_col(lane, reg); }

// ---- ldmatrix.x4 row addresses ----------------------------------------------------------
// Lane l gives the address of row l % 8 of matrix l / 8; register j of every
// lane receives matrix j. Offsets (row, column) from the operand's corner:
// A (16 x 16) of a row-major [row][k] array: registers a0..a3 of mma.
OCC_HD inline int ldsm_a_row(int lane) { return lane & 15; }
OCC_HD inline int ldsm_a_col(int lane) { return (lane >> 4) << 3; }
// B of two n-tiles x 16 k from an [n][k] array (K for Q K^T): registers
// {b0, b1} of n-tile 0, then of n-tile 1 (plain ldmatrix). Offsets (n, k).
OCC_HD inline int ldsm_bnk_row(int lane) { return (lane & 7) + ((lane >> 4) << 3); }
OCC_HD inline int ldsm_bnk_col(int lane) { return ((lane >> 3) & 1) << 3; }
// B of 16 k x two n-tiles from a [k][n] array (V for P V): the same registers
// with ldmatrix .trans. Offsets (k, n).
OCC_HD inline int ldsm_bkn_row(int lane) { return (lane & 7) + (((lane >> 3) & 1) << 3); }
OCC_HD inline int ldsm_bkn_col(int lane) { return (lane >> 4) << 3; }

// ---- grouped-query attention ------------------------------------------------------------------
// q, k and v of a head lie where kernels.h's AttentionShape says (per query
// group [q of its heads | k | v]). Forward and dQ blocks own one query head and
// read the k/v head of its group; a dK/dV block owns one k/v head and walks,
// for each query head of its group in order, the query tiles [first, first +
// span) that see its keys: step `it` of its loop is the group's query head
// dkv_step_head(it, span) and the query tile dkv_step_tile(it, span, first),
// so one loop (and one double-buffered pipeline) covers the whole group and
// each gradient element is still summed by one thread in a fixed order.
OCC_HD inline int64_t dkv_steps(int64_t group_size, int64_t span) { return group_size * span; }
OCC_HD inline int64_t dkv_step_head(int64_t it, int64_t span) { return it / span; }
OCC_HD inline int64_t dkv_step_tile(int64_t it, int64_t span, int64_t first) { return first + it % span; }

// ---- dropout ------------------------------------------------------------------------------
// The CPU keeps element idx of sample `sample` iff bits_to_unit(word) > p, where
// word = Philox::block(key, sample, idx >> 2)[idx & 3] and bits_to_unit(w) =
// ((w >> 8) + 1) * 2^-24, exactly. With m = w >> 8 an integer and x = p * 2^24
// (exact), m + 1 > x  <=>  m >= floor(x)  <=>  w >= floor(x) * 256: one integer
// compare per element. Valid for 0 <= p < 1 (the threshold stays below 2^32).
OCC_HD inline uint32_t dropout_keep_threshold(float p) {
  const float x = p * 16777216.0f;  // exact: a power-of-two scaling
  return uint32_t(x) << 8;          // truncation = floor for x >= 0
}
// Stream index of element (tq, tk) of global head `head`: the CPU's attention_dropout_row.
OCC_HD inline uint64_t dropout_index(uint64_t head, int64_t T, int64_t tq, int64_t tk) {
  return (head * uint64_t(T) + uint64_t(tq)) * uint64_t(T) + uint64_t(tk);
}
// Keep bits of the 32 consecutive stream elements idx0 .. idx0 + 31 (bit i: element
// idx0 + i): the 8 or 9 Philox blocks that hold them, four elements each.
OCC_HD inline uint32_t dropout_keep_word(uint64_t key, uint64_t sample, uint64_t idx0, uint32_t threshold) {
  const uint64_t g0 = idx0 >> 2;
  const int offset = int(idx0 & 3);
  const int groups = offset == 0 ? 8 : 9;
  uint64_t bits = 0;  // bit 4s + r: element 4 (g0 + s) + r
  for (int s = 0; s < groups; ++s) {
    const PhiloxBlock b = Philox::block(key, sample, g0 + uint64_t(s));
    const uint64_t nibble = uint64_t(b.v[0] >= threshold) | uint64_t(b.v[1] >= threshold) << 1 |
                            uint64_t(b.v[2] >= threshold) << 2 | uint64_t(b.v[3] >= threshold) << 3;
    bits |= nibble << (4 * s);
  }
  return uint32_t(bits >> offset);
}
// The keep bits of keys kc .. kc + 31 for query row tq, as the kernels store them
// in shared memory (one word per row and 32 keys). Rows past T and words wholly
// above the diagonal are 0 without drawing: the causal mask hides them.
OCC_HD inline uint32_t dropout_keep_bits(uint64_t key, uint64_t sample, uint64_t head, int64_t T, int64_t tq,
                                         int64_t kc, uint32_t threshold) {
  if (tq >= T || kc > tq) return 0;
  return dropout_keep_word(key, sample, dropout_index(head, T, tq, kc), threshold);
}
// The kernels' shared mask tile: words_per_row words per query row (row-local
// index), bit (key_local % 32) of word key_local / 32.
OCC_HD inline bool mask_bit(const uint32_t* mask, int words_per_row, int query_local, int key_local) {
  return (mask[query_local * words_per_row + (key_local >> 5)] >> (key_local & 31)) & 1u;
}

}  // namespace occ::kernels::tc
