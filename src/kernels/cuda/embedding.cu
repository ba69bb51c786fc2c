// Token and position embeddings, forward and backward (kernels/elementwise.cpp
// conventions: vocab-parallel shard [v0, v0 + V), backward accumulates +=).
//
// The token-embedding gradient must not use atomics (repeated tokens would add
// in a different order each run). Instead the (row, position) pairs are sorted
// on the device, and one block per distinct row adds that row's positions in
// ascending order: the same additions in the same order as the CPU kernel, so
// the result is bit-identical to it.
#include "kernels/cuda/common.cuh"

namespace occ::kernels::cuda {

namespace {

__global__ void embedding_forward_kernel(float* out, const int32_t* tokens, const float* wte, int64_t v0, int64_t V,
                                         int64_t N, int64_t C) {
  for (int64_t i = global_thread(); i < N * C; i += grid_threads()) {
    const int64_t n = i / C, c = i % C;
    const int64_t row = int64_t(tokens[n]) - v0;
    out[i] = (row >= 0 && row < V) ? wte[row * C + c] : 0.0f;
  }
}

// Sort keys: (shard row << 32) | position, rows outside the shard as V (they sort
// last and are skipped); the padding up to a power of two is all ones.
__global__ void embedding_keys_kernel(uint64_t* keys, const int32_t* tokens, int64_t v0, int64_t V, int64_t N,
                                      int64_t M) {
  for (int64_t i = global_thread(); i < M; i += grid_threads()) {
    if (i < N) {
      const int64_t row = int64_t(tokens[i]) - v0;
      const uint64_t r = (row >= 0 && row < V) ? uint64_t(row) : uint64_t(V);
      keys[i] = (r << 32) | uint64_t(i);
    } else {
      keys[i] = ~uint64_t(0);
    }
  }
}

// Bitonic sort of M (a power of two) keys, ascending. Element i of the stage
// with block size k sorts ascending iff (i & k) == 0. Steps whose partner
// distance j is below the tile run in shared memory, several per launch.
constexpr int kSortTile = 1024;

__device__ __forceinline__ void compare_swap(uint64_t& a, uint64_t& b, bool ascending) {
  if ((a > b) == ascending) {
    const uint64_t t = a;
    a = b;
    b = t;
  }
}

// One global step (k, j) with j >= tile: thread i pairs with i ^ j.
__global__ void bitonic_global_step_kernel(uint64_t* keys, int64_t M, int64_t k, int64_t j) {
  for (int64_t i = global_thread(); i < M; i += grid_threads()) {
    const int64_t l = i ^ j;
    if (l > i) compare_swap(keys[i], keys[l], (i & k) == 0);
  }
}

// Within each tile of blockDim.x keys: for every stage k in [k_first, k_last]
// (powers of two), the steps j = min(k / 2, j_first) .. 1.
__global__ void bitonic_tile_kernel(uint64_t* keys, int64_t k_first, int64_t k_last, int64_t j_first) {
  __shared__ uint64_t tile[kSortTile];
  const int t = threadIdx.x;
  const int64_t base = int64_t(blockIdx.x) * blockDim.x;
  tile[t] = keys[base + t];
  __syncthreads();
  for (int64_t k = k_first; k <= k_last; k <<= 1) {
    for (int64_t j = (k / 2 < j_first ? k / 2 : j_first); j > 0; j >>= 1) {
      const int l = t ^ int(j);
      if (l > t) compare_swap(tile[t], tile[l], ((base + t) & k) == 0);
      __syncthreads();
    }
  }
  keys[base + t] = tile[t];
}

// One block per sorted position; the first position of each shard row adds all
// of that row's dout rows, in position order, onto dwte.
__global__ void embedding_accumulate_kernel(float* dwte, const float* dout, const uint64_t* sorted, int64_t N,
                                            int64_t V, int64_t C) {
  for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
    const uint64_t row = sorted[i] >> 32;
    if (row >= uint64_t(V)) break;  // out-of-shard tokens: all later ones are too
    if (i > 0 && (sorted[i - 1] >> 32) == row) continue;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      float acc = dwte[int64_t(row) * C + c];
      for (int64_t j = i; j < N && (sorted[j] >> 32) == row; ++j)
        acc += dout[int64_t(sorted[j] & 0xffffffffu) * C + c];
      dwte[int64_t(row) * C + c] = acc;
    }
  }
}

__global__ void position_forward_kernel(float* out, const float* wpe, int64_t N, int64_t T, int64_t C) {
  for (int64_t i = global_thread(); i < N * C; i += grid_threads()) {
    const int64_t n = i / C, c = i % C;
    out[i] += wpe[(n % T) * C + c];
  }
}

// One thread per element of dwpe [T, C], adding rows t, t + T, ... in order (as the CPU).
__global__ void position_backward_kernel(float* dwpe, const float* dout, int64_t N, int64_t T, int64_t C) {
  for (int64_t i = global_thread(); i < T * C; i += grid_threads()) {
    const int64_t t = i / C, c = i % C;
    float acc = dwpe[i];
    for (int64_t n = t; n < N; n += T) acc += dout[n * C + c];
    dwpe[i] = acc;
  }
}

}  // namespace

void CudaOps::embedding_forward(TensorRef out, const int32_t* tokens, ConstTensorRef wte, int64_t v0, int64_t V,
                                int64_t N, int64_t C) {
  if (N <= 0 || C <= 0) return;
  embedding_forward_kernel<<<grid_for(N * C), kBlock, 0, stream_>>>(out.f32(), tokens, wte.f32(), v0, V, N, C);
  OCC_CUDA_CHECK_LAUNCH();
}

void CudaOps::embedding_backward(float* dwte, ConstTensorRef dout, const int32_t* tokens, int64_t v0, int64_t V,
                                 int64_t N, int64_t C) {
  if (N <= 0 || C <= 0 || V <= 0) return;
  if (N >= (int64_t(1) << 32) || V >= (int64_t(1) << 31))
    throw_error("CUDA embedding backward: " + std::to_string(N) + " tokens or a shard of " + std::to_string(V) +
                " rows exceeds the 32-bit sort key");
  int64_t M = 2;
  while (M < N) M <<= 1;
  uint64_t* keys = static_cast<uint64_t*>(scratch(sizeof(uint64_t) * size_t(M)));
  embedding_keys_kernel<<<grid_for(M), kBlock, 0, stream_>>>(keys, tokens, v0, V, N, M);
  OCC_CUDA_CHECK_LAUNCH();

  const int64_t tile = M < kSortTile ? M : kSortTile;
  const unsigned tiles = unsigned(M / tile);
  // Stages up to the tile size entirely in shared memory.
  bitonic_tile_kernel<<<tiles, unsigned(tile), 0, stream_>>>(keys, 2, tile, tile / 2);
  OCC_CUDA_CHECK_LAUNCH();
  for (int64_t k = 2 * tile; k <= M; k <<= 1) {
    for (int64_t j = k / 2; j >= tile; j >>= 1) {
      bitonic_global_step_kernel<<<grid_for(M), kBlock, 0, stream_>>>(keys, M, k, j);
      OCC_CUDA_CHECK_LAUNCH();
    }
    bitonic_tile_kernel<<<tiles, unsigned(tile), 0, stream_>>>(keys, k, k, tile / 2);
    OCC_CUDA_CHECK_LAUNCH();
  }

  const unsigned blocks = unsigned(N < 65535 ? N : 65535);
  embedding_accumulate_kernel<<<blocks, 128, 0, stream_>>>(dwte, dout.f32(), keys, N, V, C);
  OCC_CUDA_CHECK_LAUNCH();
}

void CudaOps::position_forward(TensorRef out, ConstTensorRef wpe, int64_t N, int64_t T, int64_t C) {
  if (N <= 0 || C <= 0) return;
  position_forward_kernel<<<grid_for(N * C), kBlock, 0, stream_>>>(out.f32(), wpe.f32(), N, T, C);
  OCC_CUDA_CHECK_LAUNCH();
}

void CudaOps::position_backward(float* dwpe, ConstTensorRef dout, int64_t N, int64_t T, int64_t C) {
  if (N <= 0 || C <= 0 || T <= 0) return;
  position_backward_kernel<<<grid_for(T * C), kBlock, 0, stream_>>>(dwpe, dout.f32(), N, T, C);
  OCC_CUDA_CHECK_LAUNCH();
}

}  // namespace occ::kernels::cuda
