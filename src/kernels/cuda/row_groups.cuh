#pragma once
// Row groups: the layout of the per-row kernels (LayerNorm and the passes fused
// with it, the dropout gradient with its bias gradient) that keep a row in
// registers. A row of C values is `row_packs` 16-byte packs (packs.cuh); a
// group of 32 * warps threads holds one row, thread t owning the packs t,
// t + group size, ... (at most P of them: P is a template parameter, so the
// row lives in registers), and a block holds `groups` row groups.
//
// Reductions over a row (group_sum) run in a fixed order that depends only on
// the layout, and the layout only on C: results are deterministic and the same
// on any GPU. Column sums over rows (parameter gradients) are accumulated per
// thread over a fixed run of rows, combined per block in group order and
// written as one partial row per block; column_partials_finish then adds the
// blocks' partials in a fixed order (no floating-point atomics anywhere).
//
// The launch arithmetic (layouts, grids, the shared memory of each launch) is
// row_launch.h's, host-only, so that the unit tests check it without a GPU.
#include <algorithm>
#include <string>

#include "kernels/cuda/packs.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/row_launch.h"

namespace occ::kernels::cuda {

// Where a thread sits in the row-group layout (warps per group from the host).
struct GroupThread {
  int t;      // thread index within its row group
  int group;  // row group within the block
  int size;   // threads per row group
};
__device__ __forceinline__ GroupThread group_thread(int warps) {
  const int size = 32 * warps;
  return {int(threadIdx.x) % size, int(threadIdx.x) / size, size};
}

// Sums each of v[0 .. K-1] over the threads of the calling thread's row group;
// every thread gets the sums. One warp: a butterfly (no barrier). Several: the
// warps' sums through shared memory, added in warp order; then every thread of
// the block must call it the same number of times (the caller's loops are
// uniform over the block).
template <int K>
__device__ __forceinline__ void group_sum(float (&v)[K], int warps) {
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = warp_sum(v[k]);
  if (warps == 1) return;
  __shared__ float warp_sums[kMaxBlockWarps][K];  // one slot per warp of the block
  static_assert(sizeof(warp_sums) == group_sum_shared_bytes(K), "row_launch.h models this array");
  const int warp = int(threadIdx.x) >> 5, first = warp - warp % warps;
  __syncthreads();  // every reader of a previous call is done
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int k = 0; k < K; ++k) warp_sums[warp][k] = v[k];
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < K; ++k) {
    float s = warp_sums[first][k];
    for (int w = 1; w < warps; ++w) s += warp_sums[first + w][k];
    v[k] = s;
  }
}

// ---- column sums over the rows of a block ------------------------------------------
// A kernel's per-thread column accumulators acc[k][i][j] (pack i of the thread,
// value j) become the block's partial row partial[k][blockIdx.x][c]: with one
// row group per block directly, else through shared memory (dynamic, `stage`,
// groups * K * C floats) summed in group order. Every thread of the block calls it.
template <int K, int P, int V>
__device__ __forceinline__ void store_block_column_partials(float* partial, const float (&acc)[K][P][V],
                                                            const GroupThread& g, int64_t C, int groups,
                                                            float* stage) {
  const int64_t row_packs = C / V;
  if (groups == 1) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      float* out = partial + (int64_t(k) * gridDim.x + blockIdx.x) * C;
#pragma unroll
      for (int i = 0; i < P; ++i) {
        const int64_t pk = g.t + int64_t(i) * g.size;
        if (pk < row_packs) store_values<V>(out + pk * V, acc[k][i]);
      }
    }
    return;
  }
#pragma unroll
  for (int k = 0; k < K; ++k) {
    float* mine = stage + (int64_t(g.group) * K + k) * C;
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const int64_t pk = g.t + int64_t(i) * g.size;
      if (pk < row_packs) store_values<V>(mine + pk * V, acc[k][i]);
    }
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < K * C; e += blockDim.x) {
    const int64_t k = e / C, c = e % C;
    float s = stage[k * C + c];
    for (int grp = 1; grp < groups; ++grp) s += stage[(int64_t(grp) * K + k) * C + c];
    partial[(k * gridDim.x + blockIdx.x) * C + c] = s;
  }
}

// outs.out[k][c] += the sum over b of partial[k][b][c] (b < blocks): 16 lanes
// per column each add every 16th block in order, then the lanes are added in
// lane order. A block: 32 columns of one k.
constexpr int kFinishLanes = 16;
template <int K>
__global__ void column_partials_finish_kernel(ColumnOutputs<K> outs, const float* partial, int64_t blocks,
                                              int64_t C) {
  __shared__ float lanes[kFinishLanes][33];
  const int k = blockIdx.y;
  float* out = nullptr;
#pragma unroll
  for (int i = 0; i < K; ++i)
    if (i == k) out = outs.out[i];
  if (!out) return;  // the whole block: nothing wanted for this k
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t c = int64_t(blockIdx.x) * 32 + tx;
  float t = 0.0f;
  if (c < C)
    for (int64_t b = ty; b < blocks; b += kFinishLanes) t += partial[(int64_t(k) * blocks + b) * C + c];
  lanes[ty][tx] = t;
  __syncthreads();
  if (ty == 0 && c < C) {
    float s = lanes[0][tx];
#pragma unroll
    for (int j = 1; j < kFinishLanes; ++j) s += lanes[j][tx];
    out[c] += s;
  }
}

template <int K>
void column_partials_finish(cudaStream_t stream, ColumnOutputs<K> outs, const float* partial, int64_t blocks,
                            int64_t C) {
  const dim3 grid(unsigned((C + 31) / 32), unsigned(K)), block(32, kFinishLanes);
  column_partials_finish_kernel<K><<<grid, block, 0, stream>>>(outs, partial, blocks, C);
  OCC_CUDA_CHECK_LAUNCH();
}

// The shared memory of a row kernel as compiled (cudaFuncGetAttributes, read
// once per kernel): its static bytes, which must be what row_launch.h models
// (the launch arithmetic sizes the dynamic bytes against the limit less them),
// and the dynamic bytes it may be launched with.
struct KernelSharedMemory {
  size_t static_bytes = 0, max_dynamic_bytes = 0;
};
template <auto Kernel>
KernelSharedMemory kernel_shared_memory(size_t modelled_static_bytes, const char* name) {
  static const KernelSharedMemory memory = [&] {
    cudaFuncAttributes attr{};
    OCC_CUDA_CHECK(cudaFuncGetAttributes(&attr, Kernel));
    if (attr.sharedSizeBytes != modelled_static_bytes)
      throw_error(std::string(name) + ": the kernel has " + std::to_string(attr.sharedSizeBytes) +
                  " bytes of static shared memory, row_launch.h models " + std::to_string(modelled_static_bytes) +
                  ": update the model (tests/unit/test_row_launch.cpp checks every launch against it)");
    return KernelSharedMemory{attr.sharedSizeBytes, size_t(attr.maxDynamicSharedSizeBytes)};
  }();
  return memory;
}

// Throws before a launch the GPU would refuse (cudaErrorInvalidValue): the
// launch's dynamic bytes past what the kernel may take.
inline void check_row_launch(const RowLaunch& l, const KernelSharedMemory& m, const char* name) {
  if (l.dynamic_bytes > m.max_dynamic_bytes || l.dynamic_bytes + l.static_bytes > l.limit)
    throw_error(std::string(name) + ": a launch with " + std::to_string(l.dynamic_bytes) + " dynamic + " +
                std::to_string(l.static_bytes) + " static bytes of shared memory exceeds the kernel's " +
                std::to_string(m.max_dynamic_bytes) + " dynamic / " + std::to_string(l.limit) + " total");
}

}  // namespace occ::kernels::cuda
