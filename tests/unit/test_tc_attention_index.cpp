// The index logic of the tensor-core attention kernels
// (kernels/cuda/tc_attention_index.h), checked on the CPU because it is the
// part of those kernels that can be checked without a GPU:
//   - the mma.m16n8k16 fragment coordinates and the ldmatrix lane addresses
//     against the PTX ISA's definitions (written out here independently);
//   - the accumulator -> A-operand register reuse of P and dS;
//   - the block/warp/tile loops of forward, dQ and dK/dV, replayed with the
//     kernels' own functions: every causal element (tk <= tq < T) is visited
//     exactly once, a tile whose mask is skipped has only visible elements,
//     and a warp skips only tiles it sees nothing of;
//   - the dropout keep bits the kernels draw and read back equal the CPU's
//     attention_dropout_row, taken from kernels::attention_forward.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/rng.h"
#include "kernels/cuda/tc_attention_index.h"
#include "kernels/kernels.h"

namespace occ::kernels::tc {
namespace {

struct RowCol {
  int row, col;
  bool operator==(const RowCol& o) const { return row == o.row && col == o.col; }
};
std::ostream& operator<<(std::ostream& os, const RowCol& rc) { return os << "(" << rc.row << ", " << rc.col << ")"; }

// ---- the PTX ISA's definitions ("Matrix Fragments for mma.m16n8k16 with floating point type") ----
// groupID = lane >> 2, threadID_in_group = lane % 4; element i of the fragment
// is half i % 2 of register i / 2.
RowCol spec_a(int lane, int reg, int half) {  // A: 16 x 16, a0..a7
  const int i = 2 * reg + half, g = lane >> 2, t = lane % 4;
  const int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
  const int col = t * 2 + (i & 1) + (i >= 4 ? 8 : 0);
  return {row, col};
}
RowCol spec_b(int lane, int reg, int half) {  // B: 16 x 8 (k, n), b0..b3
  const int i = 2 * reg + half;
  return {(lane % 4) * 2 + (i & 1) + (i >= 2 ? 8 : 0), lane >> 2};
}
RowCol spec_c(int lane, int i) {  // C: 16 x 8, c0..c3
  return {(lane >> 2) + (i >= 2 ? 8 : 0), (lane % 4) * 2 + (i & 1)};
}
// ldmatrix.x4 (PTX ISA, "ldmatrix"): lanes 8j .. 8j + 7 give the addresses of
// rows 0..7 of matrix j; register j of lane l receives elements (l / 4, 2 (l % 4))
// and (l / 4, 2 (l % 4) + 1) of matrix j, or with .trans (2 (l % 4), l / 4) and
// (2 (l % 4) + 1, l / 4). Returns the stored (row, column) that lands in half
// `half` of register j of `lane`, given the lanes' address offsets.
RowCol ldmatrix_model(int lane, int j, int half, bool trans, int (*row_of)(int), int (*col_of)(int)) {
  const int mr = trans ? 2 * (lane % 4) + half : lane / 4;
  const int mc = trans ? lane / 4 : 2 * (lane % 4) + half;
  const int address_lane = 8 * j + mr;
  return {row_of(address_lane) + 0, col_of(address_lane) + mc};
}

TEST(TcAttentionIndex, AccumulatorCoordinatesFollowThePtxLayout) {
  for (int lane = 0; lane < 32; ++lane)
    for (int reg = 0; reg < 4; ++reg)
      EXPECT_EQ((RowCol{frag_c_row(lane, reg), frag_c_col(lane, reg)}), spec_c(lane, reg)) << lane << " " << reg;
}

TEST(TcAttentionIndex, LdmatrixAddressesDeliverTheMmaOperands) {
  for (int lane = 0; lane < 32; ++lane)
    for (int j = 0; j < 4; ++j)
      for (int half = 0; half < 2; ++half) {
        // A from a row-major [row][k] tile.
        EXPECT_EQ(ldmatrix_model(lane, j, half, false, ldsm_a_row, ldsm_a_col), spec_a(lane, j, half))
            << "A lane " << lane << " reg " << j;
        // B of n-tile j / 2, register j % 2, from an [n][k] tile (plain ldmatrix): stored (n, k).
        const RowCol kn = spec_b(lane, j % 2, half);
        EXPECT_EQ(ldmatrix_model(lane, j, half, false, ldsm_bnk_row, ldsm_bnk_col),
                  (RowCol{8 * (j / 2) + kn.col, kn.row}))
            << "B[n][k] lane " << lane << " reg " << j;
        // The same registers from a [k][n] tile (ldmatrix .trans): stored (k, n).
        EXPECT_EQ(ldmatrix_model(lane, j, half, true, ldsm_bkn_row, ldsm_bkn_col),
                  (RowCol{kn.row, 8 * (j / 2) + kn.col}))
            << "B[k][n] lane " << lane << " reg " << j;
      }
}

TEST(TcAttentionIndex, AccumulatorsBecomeTheNextAOperand) {
  // P (or dS) element (row, column) of accumulator n-tile nt must land where the
  // A operand of k-step kk = column / 16 expects that element.
  for (int kk = 0; kk < 8; ++kk)
    for (int lane = 0; lane < 32; ++lane)
      for (int reg = 0; reg < 4; ++reg)
        for (int half = 0; half < 2; ++half) {
          const int nt = a_from_c_tile(kk, reg), creg = a_from_c_reg(reg, half);
          ASSERT_GE(creg, 0);
          ASSERT_LT(creg, 4);
          const RowCol from_c{frag_c_row(lane, creg), 8 * nt + frag_c_col(lane, creg)};
          const RowCol a = spec_a(lane, reg, half);
          EXPECT_EQ(from_c, (RowCol{a.row, 16 * kk + a.col})) << "kk " << kk << " lane " << lane << " reg " << reg;
        }
}

TEST(TcAttentionIndex, MaskWordAndBitOfATileColumn) {
  for (int nt = 0; nt < 16; ++nt)
    for (int lane = 0; lane < 32; ++lane)
      for (int reg = 0; reg < 4; ++reg)
        EXPECT_EQ(32 * tile_col_word(nt) + tile_col_bit(nt, lane, reg), tile_col(nt, lane, reg));
}

// ---- dropout -------------------------------------------------------------------------------
TEST(TcAttentionIndex, KeepThresholdIsTheCpuComparison) {
  // Every value of the 24 bits bits_to_unit uses, for probabilities on and off the grid.
  for (float p : {0.1f, 0.5f}) {
    const uint32_t threshold = dropout_keep_threshold(p);
    for (uint32_t m = 0; m < (1u << 24); ++m)
      for (uint32_t low : {0u, 0xffu}) {
        const uint32_t w = m << 8 | low;
        ASSERT_EQ(w >= threshold, bits_to_unit(w) > p) << "p " << p << " word " << w;
      }
  }
  for (float p : {1e-7f, 0.25f, 0.3f, 0.9999f, 0.0f, 0.99999994f}) {
    const uint32_t threshold = dropout_keep_threshold(p);
    for (int64_t delta = -1024; delta <= 1024; ++delta) {
      const int64_t w64 = int64_t(threshold) + delta;
      if (w64 < 0 || w64 > 0xffffffffll) continue;
      const uint32_t w = uint32_t(w64);
      ASSERT_EQ(w >= threshold, bits_to_unit(w) > p) << "p " << p << " word " << w;
    }
  }
}

TEST(TcAttentionIndex, KeepWordHoldsConsecutiveElements) {
  const float p = 0.3f;
  const uint32_t threshold = dropout_keep_threshold(p);
  for (uint64_t idx0 : {0ull, 1ull, 2ull, 3ull, 4ull, 1234567ull, 1234569ull, (1ull << 40) + 3}) {
    const uint32_t word = dropout_keep_word(0xABCDEFull, 9, idx0, threshold);
    for (int i = 0; i < 32; ++i) {
      const uint64_t idx = idx0 + uint64_t(i);
      const bool keep = bits_to_unit(Philox::block(0xABCDEFull, 9, idx >> 2)[int(idx & 3)]) > p;
      EXPECT_EQ(((word >> i) & 1u) != 0, keep) << "idx0 " << idx0 << " bit " << i;
    }
  }
}

// ---- the kernels' loops, replayed --------------------------------------------------------------
// The CPU's dropout decisions for one (sample, head): from kernels::attention_forward
// on zero inputs (every probability 1 / (tq + 1) > 0), kept iff the dropped
// probability is not 0.
struct CpuMasks {
  AttentionShape s;
  Dropout d;
  std::vector<float> dropped;  // [B, H, T, T]
  CpuMasks(AttentionShape shape, Dropout drop) : s(shape), d(drop) {
    std::vector<float> qkv(size_t(s.B * s.T * 3 * s.H * s.D), 0.0f), out(size_t(s.B * s.T * s.H * s.D));
    std::vector<float> probs(size_t(s.B * s.H * s.T * s.T));
    dropped.resize(probs.size());
    attention_forward(out.data(), probs.data(), dropped.data(), qkv.data(), s, d);
  }
  bool keep(int64_t b, int64_t h, int64_t tq, int64_t tk) const {
    return dropped[size_t(((b * s.H + h) * s.T + tq) * s.T + tk)] != 0.0f;
  }
};

// Which (tq, tk) a replay visited, and how often; checked for "each causal element once".
struct Visits {
  int64_t T;
  std::vector<int> count;
  explicit Visits(int64_t t) : T(t), count(size_t(t * t), 0) {}
  void add(int64_t tq, int64_t tk) { ++count[size_t(tq * T + tk)]; }
  void expect_each_causal_element_once(const std::string& what) const {
    int64_t wrong = 0;
    for (int64_t tq = 0; tq < T; ++tq)
      for (int64_t tk = 0; tk < T; ++tk) {
        const int expected = tk <= tq ? 1 : 0;
        if (count[size_t(tq * T + tk)] != expected && wrong++ < 5)
          ADD_FAILURE() << what << ": (tq " << tq << ", tk " << tk << ") visited " << count[size_t(tq * T + tk)]
                        << " times, expected " << expected;
      }
    EXPECT_EQ(wrong, 0) << what;
  }
};

// Forward and dQ: blocks of query rows, warps of rows_per_warp rows, key tiles of block_n.
// Replays tc_forward_kernel's / tc_dq_kernel's loops for one (b, h).
void replay_query_blocks(const ForwardShape& f, const CpuMasks& cpu, int64_t b, int64_t h, const std::string& what) {
  const int64_t T = cpu.s.T;
  const int bm = f.block_m(), bn = f.block_n, rpw = f.rows_per_warp(), words = bn / 32;
  const uint64_t sample = uint64_t(cpu.d.sample_base + b), head = uint64_t(cpu.s.head0 + h);
  const uint32_t threshold = dropout_keep_threshold(cpu.d.p);
  Visits visits(T);
  for (int64_t q0 = 0; q0 < T; q0 += bm) {
    const int n_tiles = key_tiles_for_queries(q0, bm, T, bn);
    // Keys past the visited tiles are invisible to every row of the block.
    for (int64_t tq = q0; tq < q0 + bm && tq < T; ++tq) ASSERT_LT(tq, int64_t(n_tiles) * bn) << what;
    for (int j = 0; j < n_tiles; ++j) {
      const int64_t k0 = int64_t(j) * bn;
      std::vector<uint32_t> mask(size_t(bm * words));  // fill_keep_mask
      for (int u = 0; u < bm * words; ++u)
        mask[size_t(u)] =
            dropout_keep_bits(cpu.d.key, sample, head, T, q0 + u / words, k0 + 32 * (u % words), threshold);
      for (int warp = 0; warp < f.warps; ++warp) {
        const int64_t warp_first = q0 + warp * rpw, warp_last = warp_first + rpw - 1;
        if (!rows_see_key_tile(warp_last, k0)) {
          for (int64_t tq = warp_first; tq <= warp_last; ++tq)
            for (int64_t tk = k0; tk < k0 + bn; ++tk) ASSERT_FALSE(key_visible(tq, tk, T)) << what << " skipped tile";
          continue;
        }
        const bool masked = key_tile_needs_mask(warp_first, k0, bn, T);
        for (int mt = 0; mt < f.m_tiles; ++mt)
          for (int lane = 0; lane < 32; ++lane)
            for (int rh = 0; rh < 2; ++rh) {
              const int r = block_row(warp, rpw, mt, lane, 2 * rh);  // as the kernels compute the row
              const int64_t tq = q0 + r;
              for (int nt = 0; nt < bn / 8; ++nt)
                for (int e = 0; e < 2; ++e) {
                  const int reg = 2 * rh + e;
                  ASSERT_EQ(block_row(warp, rpw, mt, lane, reg), r);
                  const int64_t tk = k0 + tile_col(nt, lane, reg);
                  const bool visible = key_visible(tq, tk, T);
                  if (!masked) {
                    ASSERT_TRUE(visible) << what << ": unmasked tile with an invisible element";
                  }
                  if (!visible || tq >= T) continue;
                  visits.add(tq, tk);
                  if (cpu.d.active()) {
                    const bool keep = (mask[size_t(r * words + tile_col_word(nt))] >> tile_col_bit(nt, lane, reg)) & 1u;
                    ASSERT_EQ(keep, cpu.keep(b, h, tq, tk)) << what << ": dropout bit of (" << tq << ", " << tk << ")";
                  }
                }
            }
      }
    }
  }
  visits.expect_each_causal_element_once(what);
}

// dK/dV: blocks of keys, warps of 16 keys, query tiles of block_m. Replays tc_dkv_kernel's loops.
void replay_key_blocks(const DkvShape& f, const CpuMasks& cpu, int64_t b, int64_t h, const std::string& what) {
  const int64_t T = cpu.s.T;
  const int bn = f.block_n(), bm = f.block_m, words = bn / 32;
  const uint64_t sample = uint64_t(cpu.d.sample_base + b), head = uint64_t(cpu.s.head0 + h);
  const uint32_t threshold = dropout_keep_threshold(cpu.d.p);
  Visits visits(T);
  for (int64_t k0 = 0; k0 < T; k0 += bn) {
    const int64_t i0 = first_query_tile(k0, bm), n_q = query_tiles(T, bm);
    // Queries before the first visited tile see none of the block's keys.
    for (int64_t tq = 0; tq < i0 * bm; ++tq) ASSERT_LT(tq, k0) << what;
    ASSERT_GE(n_q * bm, T) << what;
    for (int64_t i = i0; i < n_q; ++i) {
      const int64_t q0 = i * bm;
      std::vector<uint32_t> mask(size_t(bm * words));  // rows: queries, bits: keys
      for (int u = 0; u < bm * words; ++u)
        mask[size_t(u)] =
            dropout_keep_bits(cpu.d.key, sample, head, T, q0 + u / words, k0 + 32 * (u % words), threshold);
      for (int warp = 0; warp < f.warps; ++warp) {
        const int64_t key_first = k0 + 16 * warp;
        if (!keys_see_query_tile(key_first, q0, bm, T)) {
          for (int64_t tk = key_first; tk < key_first + 16; ++tk)
            for (int64_t tq = q0; tq < q0 + bm; ++tq)
              ASSERT_FALSE(key_visible(tq, tk, T) && tq < T) << what << " skipped tile";
          continue;
        }
        const bool masked = query_tile_needs_mask(q0, bm, key_first, 16, T);
        for (int lane = 0; lane < 32; ++lane)
          for (int nt = 0; nt < bm / 8; ++nt)
            for (int e = 0; e < 2; ++e) {
              const int qc = tile_col(nt, lane, e);  // as the kernel computes the column
              const int64_t tq = q0 + qc;
              for (int rh = 0; rh < 2; ++rh) {
                const int reg = 2 * rh + e;
                ASSERT_EQ(tile_col(nt, lane, reg), qc);
                const int kr = block_row(warp, 16, 0, lane, reg);
                const int64_t tk = k0 + kr;
                const bool visible = key_visible(tq, tk, T) && tq < T;
                if (!masked) {
                  ASSERT_TRUE(visible) << what << ": unmasked tile with an invisible element";
                }
                if (!visible) continue;
                visits.add(tq, tk);
                if (cpu.d.active()) {
                  ASSERT_EQ(mask_bit(mask.data(), words, qc, kr), cpu.keep(b, h, tq, tk))
                      << what << ": dropout bit of (" << tq << ", " << tk << ")";
                }
              }
            }
      }
    }
  }
  visits.expect_each_causal_element_once(what);
}

TEST(TcAttentionIndex, EveryCausalElementOnceWithTheCpuDropoutBits) {
  // Lengths around the tile sizes (32, 64, 128) and odd ones; two samples and
  // heads with a nonzero head0 and sample_base, so the dropout coordinates move.
  for (int64_t T : {1, 2, 7, 31, 33, 63, 64, 65, 100, 127, 128, 129, 200, 257}) {
    Dropout d;
    d.key = 0x77;
    d.p = 0.1f;
    d.sample_base = 5;
    const AttentionShape s{2, T, 2, 8, 3, 8};
    const CpuMasks cpu(s, d);
    for (int D : {64, 128})
      for (int64_t b = 0; b < s.B; ++b)
        for (int64_t h = 0; h < s.H; ++h) {
          const std::string tag = " T=" + std::to_string(T) + " D=" + std::to_string(D) + " b=" + std::to_string(b) +
                                  " h=" + std::to_string(h);
          replay_query_blocks(forward_shape(D), cpu, b, h, "forward" + tag);
          const DqShape q = dq_shape(D);
          replay_query_blocks(ForwardShape{q.warps, 1, q.block_n}, cpu, b, h, "dQ" + tag);
          replay_key_blocks(dkv_shape(D), cpu, b, h, "dK/dV" + tag);
        }
  }
}

TEST(TcAttentionIndex, CoverageWithoutDropout) {
  // The same replay with p = 0 (the kernels then read no mask).
  for (int64_t T : {5, 96, 130}) {
    const AttentionShape s{1, T, 1, 8, 0, 1};
    const CpuMasks cpu(s, Dropout{});
    for (int D : {64, 128}) {
      replay_query_blocks(forward_shape(D), cpu, 0, 0, "forward T=" + std::to_string(T));
      replay_key_blocks(dkv_shape(D), cpu, 0, 0, "dK/dV T=" + std::to_string(T));
    }
  }
}

TEST(TcAttentionIndex, BlockShapesFitTheKernels) {
  for (int D : {64, 128}) {
    const ForwardShape f = forward_shape(D);
    EXPECT_EQ(f.block_n % 32, 0);  // whole mask words per row
    EXPECT_EQ(f.block_n % 16, 0);  // whole k-steps of P V
    EXPECT_LE(f.warps * 32, 1024);
    const DkvShape kv = dkv_shape(D);
    EXPECT_EQ(kv.block_n() % 32, 0);
    EXPECT_EQ(kv.block_m % 16, 0);
    EXPECT_EQ(kv.block_n() % kv.block_m, 0);  // the first query tile of a key block starts at its first key
    EXPECT_EQ(dq_shape(D).block_n % 32, 0);
  }
}

}  // namespace
}  // namespace occ::kernels::tc
