// The launch arithmetic of the CUDA row kernels (kernels/cuda/row_launch.h) and
// the shared memory of the tensor-core attention kernels
// (kernels/cuda/tc_attention_index.h), checked without a GPU: every launch the
// backend can make must fit the shared memory the GPU grants it. A launch whose
// dynamic plus static shared memory passes the block's limit is refused by the
// driver (cudaErrorInvalidValue) before it runs, so a miss here is a certain
// failure on the GPU (a LayerNorm backward at C = 1024 in bf16 was one: 4 row
// groups staged 49,152 dynamic bytes beside the kernel's 256 static bytes).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/precision.h"
#include "kernels/cuda/row_launch.h"
#include "kernels/cuda/tc_attention_index.h"

namespace occ::kernels::cuda {
namespace {

constexpr Precision kFormats[] = {Precision::Fp32, Precision::Bf16, Precision::Fp16};
constexpr int64_t kRows[] = {1, 7, 4099, 65536};

std::string where(const char* kernel, Precision f, int64_t N, int64_t C, int K) {
  return std::string(kernel) + " " + precision_name(f) + " N=" + std::to_string(N) + " C=" + std::to_string(C) +
         " K=" + std::to_string(K);
}

// What every launch must satisfy: the shared memory fits, the block is legal,
// the layout covers the row and the grid the rows. Returns what is wrong ("" if nothing).
std::string problems(const RowLaunch& l, Precision f, int64_t N, int64_t C, int K) {
  std::string p;
  const auto add = [&](const std::string& x) { p += (p.empty() ? "" : "; ") + x; };
  if (l.dynamic_bytes + l.static_bytes > l.limit)
    add(std::to_string(l.dynamic_bytes) + " dynamic + " + std::to_string(l.static_bytes) +
        " static bytes of shared memory > " + std::to_string(l.limit) + " (groups " + std::to_string(l.layout.groups) +
        ", warps " + std::to_string(l.layout.warps) + ")");
  if (l.limit != kDefaultSharedLimit) add("the row kernels do not opt into more than 48 KiB");
  if (l.dynamic_bytes != (K > 0 ? stage_bytes(l.layout.groups, K, C) : 0)) add("dynamic bytes not the stage's");
  if (l.layout.groups < 1 || l.layout.threads() > 1024 || l.layout.threads() % 32 != 0)
    add("block of " + std::to_string(l.layout.threads()) + " threads");
  if (int64_t(32) * l.layout.warps * l.layout.packs * pack_values(f) < C) add("the row is not covered");
  if (N > 0 && (l.grid.blocks * l.layout.groups * l.grid.rows_per_group < N || l.grid.blocks > kColumnBlocks))
    add("the grid does not cover the rows");
  return p;
}

// Collects the launches that fail; the test prints the widths (up to 12) and how many.
struct Misses {
  std::vector<std::string> all;
  void check(const RowLaunch& l, Precision f, int64_t N, int64_t C, int K, const std::string& what) {
    const std::string p = problems(l, f, N, C, K);
    if (!p.empty()) all.push_back(what + ": " + p);
  }
  std::string report() const {
    std::string s = std::to_string(all.size()) + " launches fail:";
    for (size_t i = 0; i < all.size() && i < 12; ++i) s += "\n  " + all[i];
    return s;
  }
};

TEST(RowLaunch, LayerNormBackwardFitsSharedMemoryForEveryWidth) {
  int64_t launches = 0;
  Misses misses;
  for (Precision f : kFormats)
    for (int K : {2, 3})
      for (bool params : {true, false})
        for (int64_t C = 8; C <= 16384; C += 8)
          for (int64_t N : kRows) {
            RowLaunch l;
            const bool fast = layernorm_backward_launch(f, N, C, K, params, kLayerNormBackwardStaticBytes, l);
            const std::string what = where("layernorm_backward_rows_kernel", f, N, C, K) + (params ? "" : " no params");
            // The fast path takes every width it documents: 16-bit rows up to 16384, fp32 up to 8192.
            const int64_t widest = f == Precision::Fp32 ? 8192 : 16384;
            if (fast != (C % pack_values(f) == 0 && C <= widest)) misses.all.push_back(what + ": fast path " + (fast ? "taken" : "not taken"));
            if (!fast) continue;
            ++launches;
            if (N == kRows[0] || N == kRows[3]) misses.check(l, f, N, C, params ? K : 0, what);
          }
  EXPECT_TRUE(misses.all.empty()) << misses.report();
  EXPECT_GT(launches, 40000);
}

TEST(RowLaunch, DropoutGradientFitsSharedMemoryForEveryWidth) {
  Misses misses;
  for (Precision f : kFormats)
    for (int64_t C = 8; C <= 16384; C += 8)
      for (int64_t N : kRows) {
        RowLaunch l;
        const std::string what = where("dropout_grad_rows_kernel", f, N, C, 1);
        if (!dropout_grad_launch(f, N, C, kDropoutGradStaticBytes, l)) {
          if (C <= (f == Precision::Fp32 ? 8192 : 16384)) misses.all.push_back(what + ": fell back");
          continue;
        }
        misses.check(l, f, N, C, 1, what);
      }
  EXPECT_TRUE(misses.all.empty()) << misses.report();
}

TEST(RowLaunch, LayerNormForwardUsesStaticSharedMemoryOnly) {
  Misses misses;
  for (Precision f : kFormats)
    for (int64_t C = 8; C <= 32768; C += 8) {
      RowLaunch l;
      const std::string what = where("layernorm_forward_rows_kernel", f, 1, C, 0);
      if (!layernorm_forward_launch(f, C, kLayerNormForwardStaticBytes, l)) {
        if (C <= (f == Precision::Fp32 ? 16384 : 32768)) misses.all.push_back(what + ": fell back");
        continue;
      }
      misses.check(l, f, 0, C, 0, what);
    }
  EXPECT_TRUE(misses.all.empty()) << misses.report();
}

// The model the arithmetic rests on: group_sum<K>'s slots, and the worked case of the
// review (C = 1024 bf16, K = 3: a block of 2-warp groups; 4 groups would stage 48 KiB).
TEST(RowLaunch, StaticBytesModelAndTheWorkedCase) {
  EXPECT_EQ(kLayerNormBackwardStaticBytes, 256u);  // ptxas: "256 bytes smem" for the backward kernels
  EXPECT_EQ(kLayerNormForwardStaticBytes, 128u);
  RowLaunch l;
  ASSERT_TRUE(layernorm_backward_launch(Precision::Bf16, 8192, 1024, 3, true, kLayerNormBackwardStaticBytes, l));
  EXPECT_EQ(l.layout.packs, 2);
  EXPECT_EQ(l.layout.warps, 2);
  EXPECT_EQ(l.layout.groups, 3) << "4 groups of 3 x 1024 floats are 49,152 bytes: with 256 static, over 48 KiB";
  EXPECT_EQ(l.dynamic_bytes, 3u * 3u * 1024u * 4u);
}

// The tensor-core attention kernels opt into more than 48 KiB (cudaFuncSetAttribute):
// each block must fit the smallest opt-in limit of the architectures built.
TEST(RowLaunch, TensorCoreAttentionFitsTheOptInLimit) {
  for (int D : {64, 128}) {
    const size_t fwd = tc::forward_smem_bytes(2, D, tc::forward_shape(D));
    const size_t dq = tc::dq_smem_bytes(2, D, tc::dq_shape(D));
    const size_t dkv = tc::dkv_smem_bytes(2, D, tc::dkv_shape(D));
    for (size_t bytes : {fwd, dq, dkv}) {
      EXPECT_LE(bytes, tc::kOptInSharedLimitSm80) << "D=" << D;
      EXPECT_LE(bytes, tc::kOptInSharedLimitSm90) << "D=" << D;
    }
    std::printf("[ tc smem  ] D=%d: forward %zu, dQ %zu, dK/dV %zu bytes (opt-in limit sm_80 %zu, sm_90 %zu)\n", D,
                fwd, dq, dkv, tc::kOptInSharedLimitSm80, tc::kOptInSharedLimitSm90);
  }
  EXPECT_EQ(tc::forward_smem_bytes(2, 64, tc::forward_shape(64)), 56320u);  // 2 (128 + 256) 72 + 4 128 2
}

}  // namespace
}  // namespace occ::kernels::cuda
