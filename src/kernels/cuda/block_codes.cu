// The CUDA twin of kernels/block_codes.cpp: the block compressors' wires, byte
// for byte the CPU's (tests/cuda/test_cuda_compressors.cpp). One thread packs
// (or unpacks) one block with the per-block functions the CPU calls
// (kernels/block_codes.h); nvfp4's row scales come first from one block's
// maximum per row (a maximum is exact in any order).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"

namespace occ::kernels::cuda {

namespace {

__global__ void nvfp4_row_scales_kernel(const float* m, float* wire, int64_t c) {
  const int64_t i = blockIdx.x;
  const float* x = m + i * c;
  float amax = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
    if (finite_value(x[j])) amax = fmaxf(amax, fabsf(x[j]));
  amax = block_reduce(amax, MaxOp{}, 0.0f);
  if (threadIdx.x == 0) wire[i] = nvfp4_row_scale(amax);
}

__global__ void encode_blocks_kernel(const float* m, float* wire, int64_t n, int64_t c, BlockCoding coding) {
  const BlockCode code = coding.code;
  const int64_t nb = blocks_per_row(code, c), B = block_entries(code);
  unsigned char* scales = reinterpret_cast<unsigned char*>(wire) + block_scales_offset(code, n);
  unsigned char* codes = reinterpret_cast<unsigned char*>(wire) + block_codes_offset(code, n, c);
  for (int64_t at = global_thread(); at < n * nb; at += grid_threads()) {
    const int64_t i = at / nb, b = at % nb;
    const float row_scale = code == BlockCode::Nvfp4 ? wire[i] : 0.0f;
    const int64_t len = c - b * B < B ? c - b * B : B;
    encode_block(coding, m + i * c + b * B, int(len), uint64_t(at), row_scale, scales + at * block_scale_bytes(code),
                 codes + at * block_code_bytes(code));
  }
}

__global__ void decode_blocks_kernel(const float* wire, float* out, int64_t n, int64_t c, BlockCode code) {
  const int64_t nb = blocks_per_row(code, c), B = block_entries(code);
  const unsigned char* scales = reinterpret_cast<const unsigned char*>(wire) + block_scales_offset(code, n);
  const unsigned char* codes = reinterpret_cast<const unsigned char*>(wire) + block_codes_offset(code, n, c);
  for (int64_t at = global_thread(); at < n * nb; at += grid_threads()) {
    const int64_t i = at / nb, b = at % nb;
    const float row_scale = code == BlockCode::Nvfp4 ? wire[i] : 0.0f;
    const int64_t len = c - b * B < B ? c - b * B : B;
    decode_block(code, scales + at * block_scale_bytes(code), codes + at * block_code_bytes(code), row_scale,
                 out + i * c + b * B, int(len));
  }
}

}  // namespace

void CudaOps::encode_blocks(const float* m, float* wire, int64_t n, int64_t c, const BlockCoding& coding) {
  if (n <= 0 || c <= 0) return;
  // The last word first: its bytes after the last code stay zero (the kernels write the rest).
  const int64_t words = words_for_bytes(block_wire_bytes(coding.code, n, c));
  OCC_CUDA_CHECK(cudaMemsetAsync(wire + (words - 1), 0, 4, stream_));
  if (coding.code == BlockCode::Nvfp4) {
    nvfp4_row_scales_kernel<<<unsigned(n), kBlock, 0, stream_>>>(m, wire, c);
    OCC_CUDA_CHECK_LAUNCH();
  }
  encode_blocks_kernel<<<grid_for(n * blocks_per_row(coding.code, c), 128), 128, 0, stream_>>>(m, wire, n, c, coding);
  OCC_CUDA_CHECK_LAUNCH();
}

void CudaOps::decode_blocks(const float* wire, float* out, int64_t n, int64_t c, BlockCode code) {
  if (n <= 0 || c <= 0) return;
  decode_blocks_kernel<<<grid_for(n * blocks_per_row(code, c), 128), 128, 0, stream_>>>(wire, out, n, c, code);
  OCC_CUDA_CHECK_LAUNCH();
}

}  // namespace occ::kernels::cuda
