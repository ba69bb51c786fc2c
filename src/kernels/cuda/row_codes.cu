// The CUDA twin of kernels/row_codes.cpp: one-byte codes with a per-row scale
// (int8 / fp8 compression). The absmax is a maximum (exact in any order), and
// the division and the conversions (row_codes.h, shared with the CPU) are
// exact IEEE operations, so the wire is the CPU's byte for byte
// (tests/cuda/test_cuda_compressors.cpp).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"

namespace occ::kernels::cuda {

namespace {

// One block per row: the row's absmax, its scale, then its codes.
__global__ void encode_scaled_rows_kernel(const float* m, float* wire, int64_t n, int64_t c, RowCode code) {
  const int64_t i = blockIdx.x;
  const float* x = m + i * c;
  float absmax = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) absmax = fmaxf(absmax, fabsf(x[j]));
  absmax = block_reduce(absmax, MaxOp{}, 0.0f);
  const float scale = absmax / row_code_top(code);
  if (threadIdx.x == 0) wire[i] = scale;
  unsigned char* row = reinterpret_cast<unsigned char*>(wire) + 4 * n + i * c;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    const float v = x[j];
    row[j] = scale > 0.0f ? row_encode(code, isnan(v) ? 0.0f : v / scale) : 0;
  }
}

__global__ void decode_scaled_rows_kernel(const float* wire, float* out, int64_t n, int64_t c, RowCode code) {
  const unsigned char* codes = reinterpret_cast<const unsigned char*>(wire) + 4 * n;
  for (int64_t p = global_thread(); p < n * c; p += grid_threads()) out[p] = row_decode(code, codes[p]) * wire[p / c];
}

}  // namespace

void CudaOps::encode_scaled_rows(const float* m, float* wire, int64_t n, int64_t c, RowCode code) {
  if (n <= 0 || c <= 0) return;
  // The last word first: its bytes after the last code stay zero (the kernel writes the codes over the rest).
  const int64_t words = (row_code_bytes(n, c) + 3) / 4;
  OCC_CUDA_CHECK(cudaMemsetAsync(wire + (words - 1), 0, 4, stream_));
  encode_scaled_rows_kernel<<<unsigned(n), kBlock, 0, stream_>>>(m, wire, n, c, code);
  OCC_CUDA_CHECK_LAUNCH();
}

void CudaOps::decode_scaled_rows(const float* wire, float* out, int64_t n, int64_t c, RowCode code) {
  if (n <= 0 || c <= 0) return;
  decode_scaled_rows_kernel<<<grid_for(n * c), kBlock, 0, stream_>>>(wire, out, n, c, code);
  OCC_CUDA_CHECK_LAUNCH();
}

}  // namespace occ::kernels::cuda
