#pragma once
// Deterministic column sums for parameter gradients (bias, LayerNorm weight and
// bias): out_k[c] += sum_n f(n, c)_k over a virtual [N, C] matrix, without
// floating-point atomics, so that a gradient repeats bit for bit.
//
//   pass 1: block (tile of 32 columns, chunk of rows): 8 row lanes each add
//           every 8th row of the chunk, then the 8 lane sums are added in lane
//           order into partial[k][chunk][c];
//   pass 2: one thread per column adds the chunk partials in chunk order onto out_k[c].
//
// The chunk size is a function of N only (not of the GPU), so the order, and
// hence the bits, are the same on any GPU.
#include "kernels/cuda/common.cuh"

namespace occ::kernels::cuda {

template <int K>
struct ColumnOutputs {
  float* out[K];  // nullptr: that output is not wanted
};

template <int K, class F>
__global__ void column_partials_kernel(float* partial, F f, int64_t N, int64_t C, int64_t rows_per_chunk) {
  __shared__ float lanes[K][8][33];  // +1: no bank conflicts on the column reads below
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t c = int64_t(blockIdx.x) * 32 + tx;
  const int64_t chunk = blockIdx.y, chunks = gridDim.y;
  const int64_t n0 = chunk * rows_per_chunk;
  const int64_t n1 = n0 + rows_per_chunk < N ? n0 + rows_per_chunk : N;
  float acc[K];
#pragma unroll
  for (int k = 0; k < K; ++k) acc[k] = 0.0f;
  if (c < C) {
    for (int64_t n = n0 + ty; n < n1; n += 8) {
      float v[K];
      f(n, c, v);
#pragma unroll
      for (int k = 0; k < K; ++k) acc[k] += v[k];
    }
  }
#pragma unroll
  for (int k = 0; k < K; ++k) lanes[k][ty][tx] = acc[k];
  __syncthreads();
  if (ty == 0 && c < C) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      float t = lanes[k][0][tx];
#pragma unroll
      for (int j = 1; j < 8; ++j) t += lanes[k][j][tx];
      partial[(k * chunks + chunk) * C + c] = t;
    }
  }
}

template <int K>
__global__ void column_finish_kernel(ColumnOutputs<K> outs, const float* partial, int64_t chunks, int64_t C) {
  const int64_t c = global_thread();
  if (c >= C) return;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    if (!outs.out[k]) continue;
    float t = 0.0f;
    for (int64_t ch = 0; ch < chunks; ++ch) t += partial[(k * chunks + ch) * C + c];
    outs.out[k][c] += t;
  }
}

// f: a device functor void(int64_t n, int64_t c, float (&v)[K]).
template <int K, class F>
void column_sums_add(CudaOps& ops, ColumnOutputs<K> outs, F f, int64_t N, int64_t C) {
  if (N <= 0 || C <= 0) return;
  int64_t rows_per_chunk = 64;
  while ((N + rows_per_chunk - 1) / rows_per_chunk > 65535) rows_per_chunk *= 2;  // gridDim.y limit
  const int64_t chunks = (N + rows_per_chunk - 1) / rows_per_chunk;
  float* partial = static_cast<float*>(ops.scratch(sizeof(float) * size_t(K * chunks * C)));
  const dim3 grid(unsigned((C + 31) / 32), unsigned(chunks)), block(32, 8);
  column_partials_kernel<K><<<grid, block, 0, ops.stream()>>>(partial, f, N, C, rows_per_chunk);
  OCC_CUDA_CHECK_LAUNCH();
  column_finish_kernel<K><<<grid_for(C), kBlock, 0, ops.stream()>>>(outs, partial, chunks, C);
  OCC_CUDA_CHECK_LAUNCH();
}

// The rows of a dense [N, C] matrix, as a column_sums_add functor.
struct DenseRows {
  const float* x;
  int64_t C;
  __device__ __forceinline__ void operator()(int64_t n, int64_t c, float (&v)[1]) const { v[0] = x[n * C + c]; }
};

}  // namespace occ::kernels::cuda
