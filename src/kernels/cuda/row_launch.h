#pragma once
// The launch arithmetic of the row kernels (row_groups.cuh: LayerNorm / RMSNorm
// and the passes fused with them, the dropout gradient with its bias gradient):
// the row-group layout, the column-sum grid and the shared memory each launch
// asks for. Host-only and free of CUDA syntax, so that the unit tests walk it on
// any machine (tests/unit/test_row_launch.cpp): every launch must fit the
// shared memory the GPU grants it, dynamic and static together.
//
// Shared memory. Without cudaFuncSetAttribute(MaxDynamicSharedMemorySize) a
// block may use kDefaultSharedLimit bytes in all: the kernel's static
// __shared__ arrays plus the dynamic bytes of the launch. A launch past that
// fails with cudaErrorInvalidValue before it runs. The row kernels stage their
// groups' column sums in dynamic memory, so the groups per block are chosen
// against the limit less the kernel's static bytes (the host reads those once
// per kernel through cudaFuncGetAttributes and checks them against the model
// below, which the kernels' declarations are static_assert-ed to).
//
// The other kernels of the backend: the tensor-core attention kernels take all
// their shared memory dynamically and opt into more than 48 KiB (their byte
// counts: tc_attention_index.h, static_assert-ed under sm_80's opt-in limit);
// every other kernel (fp32 flash attention, cross-entropy, the column sums,
// embeddings, top-k, Gram-Schmidt) declares static shared memory only, which
// ptxas bounds at 48 KiB when it compiles them.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/precision.h"

namespace occ::kernels::cuda {

// Threads per block of the row kernels (common.cuh's kBlock).
constexpr int kRowBlockThreads = 256;
// Bytes of shared memory a block may use without opting in.
constexpr size_t kDefaultSharedLimit = size_t(48) << 10;

// Values per 16-byte pack of a storage format (packs.cuh's kPack).
constexpr int pack_values(Precision storage) { return storage == Precision::Fp32 ? 4 : 8; }

struct RowLayout {
  int packs = 0;   // P: packs per thread (the kernel instantiation)
  int warps = 0;   // warps per row group (1 .. 32)
  int groups = 0;  // row groups per block
  int threads() const { return 32 * warps * groups; }
};

// The layout for rows of `row_packs` packs with 1 .. max_packs packs per
// thread: the fewest idle pack slots (registers a kernel holds for packs past
// the row's end), then the fewest warps per row (fewer barriers); as many
// groups per block as fit `block_threads`. A function of the shape only.
// Returns false when a row needs more than 32 warps (the caller's fallback).
inline bool choose_row_layout(int64_t row_packs, int max_packs, int block_threads, RowLayout& out) {
  if (row_packs <= 0) return false;
  int64_t best_idle = -1;
  for (int warps = 1; warps <= 32; ++warps) {
    for (int p = 1; p <= max_packs; ++p) {
      const int64_t capacity = int64_t(32) * warps * p;
      if (capacity < row_packs) continue;
      if (best_idle < 0 || capacity - row_packs < best_idle) {
        best_idle = capacity - row_packs;
        out = RowLayout{p, warps, std::max(1, block_threads / (32 * warps))};
      }
      break;  // more packs per thread only idle more slots
    }
  }
  return best_idle >= 0;
}

// The blocks of a column-summing row kernel and the rows each of its groups
// takes (a contiguous run), as functions of N and the layout only, so that the
// order of the additions, hence the bits, never depend on the GPU.
// kColumnBlocks bounds the partial rows the finish pass reads.
constexpr int64_t kColumnBlocks = 512;
struct ColumnGrid {
  int64_t blocks = 0, rows_per_group = 0;
};
inline ColumnGrid column_grid(int64_t N, int groups) {
  const int64_t group_rows = (N + kColumnBlocks * groups - 1) / (kColumnBlocks * groups);  // >= 1
  const int64_t rows_per_block = group_rows * groups;
  return {(N + rows_per_block - 1) / rows_per_block, group_rows};
}

// ---- static shared memory of the row kernels --------------------------------------------
// group_sum<K> (row_groups.cuh) holds one slot per warp of the block: K floats
// for each of at most kMaxBlockWarps warps.
constexpr int kMaxBlockWarps = 32;
OCC_HD constexpr size_t group_sum_shared_bytes(int K) { return sizeof(float) * size_t(kMaxBlockWarps) * size_t(K); }
// What each kernel declares: the LayerNorm backward sums two values per row
// (group_sum<2>), the forward one at a time (group_sum<1>); the dropout
// gradient has no row sum.
constexpr size_t kLayerNormBackwardStaticBytes = group_sum_shared_bytes(2);
constexpr size_t kLayerNormForwardStaticBytes = group_sum_shared_bytes(1);
constexpr size_t kDropoutGradStaticBytes = 0;

// ---- dynamic shared memory: the staged column sums -----------------------------------
// A column-summing kernel with several row groups per block stages each
// group's K partial rows of C floats, then adds them in group order. The
// groups per block are cut to what fits `dynamic_limit` bytes (at least one:
// a single group writes its partials directly and stages nothing).
inline size_t stage_bytes(int groups, int K, int64_t C) {
  return groups <= 1 ? 0 : size_t(groups) * size_t(K) * size_t(C) * sizeof(float);
}
inline int staged_groups(int groups, int K, int64_t C, size_t dynamic_limit) {
  if (groups <= 1) return 1;
  const int64_t fit = int64_t(dynamic_limit) / (int64_t(K) * C * int64_t(sizeof(float)));
  return int(std::max<int64_t>(1, std::min<int64_t>(groups, fit)));
}

// One launch of a row kernel: its layout and grid, the dynamic bytes it asks
// for, the kernel's static bytes and the limit both must fit together.
struct RowLaunch {
  RowLayout layout;
  ColumnGrid grid;
  size_t dynamic_bytes = 0, static_bytes = 0, limit = kDefaultSharedLimit;
};

// Packs per thread: the forward keeps one row in registers; the backward two
// (dout, inp) and up to three column sums per value, so fewer packs and more
// threads; the dropout gradient one row and one column sum.
constexpr int kMaxForwardPacks = 4, kMaxBackwardPacks = 2, kMaxGradPacks = 2;

// The dynamic bytes a kernel with `static_bytes` of its own may ask for.
inline size_t dynamic_limit(size_t static_bytes, size_t limit = kDefaultSharedLimit) {
  return static_bytes >= limit ? 0 : limit - static_bytes;
}

// A column-summing launch (K partial rows per group, `params`: any column sum
// wanted) for rows of C values in `storage`; false where the row needs the
// simple path (C not a multiple of the pack, or more than 32 warps per row).
inline bool column_row_launch(Precision storage, int64_t N, int64_t C, int K, int max_packs, bool params,
                              size_t static_bytes, RowLaunch& out) {
  const int V = pack_values(storage);
  if (C <= 0 || C % V != 0) return false;
  RowLaunch l;
  if (!choose_row_layout(C / V, max_packs, kRowBlockThreads, l.layout)) return false;
  l.static_bytes = static_bytes;
  if (params) l.layout.groups = staged_groups(l.layout.groups, K, C, dynamic_limit(static_bytes, l.limit));
  l.grid = column_grid(N, l.layout.groups);
  l.dynamic_bytes = params ? stage_bytes(l.layout.groups, K, C) : 0;
  out = l;
  return true;
}

// layernorm_backward_rows_kernel<S, P, K>: K = 2 (dw, db) or 3 (and the dropout's dbias).
inline bool layernorm_backward_launch(Precision storage, int64_t N, int64_t C, int K, bool params,
                                      size_t static_bytes, RowLaunch& out) {
  return column_row_launch(storage, N, C, K, kMaxBackwardPacks, params, static_bytes, out);
}
// dropout_grad_rows_kernel<S, P>: one column sum (the bias gradient).
inline bool dropout_grad_launch(Precision storage, int64_t N, int64_t C, size_t static_bytes, RowLaunch& out) {
  return column_row_launch(storage, N, C, 1, kMaxGradPacks, true, static_bytes, out);
}
// layernorm_forward_rows_kernel<S, X, P>: no column sums, no dynamic memory.
inline bool layernorm_forward_launch(Precision storage, int64_t C, size_t static_bytes, RowLaunch& out) {
  const int V = pack_values(storage);
  if (C <= 0 || C % V != 0) return false;
  RowLaunch l;
  if (!choose_row_layout(C / V, kMaxForwardPacks, kRowBlockThreads, l.layout)) return false;
  l.static_bytes = static_bytes;
  out = l;
  return true;
}

}  // namespace occ::kernels::cuda
