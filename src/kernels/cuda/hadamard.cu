// The CUDA twin of kernels/hadamard.cpp: the randomized Hadamard rotation, bit
// for bit the CPU's (tests/cuda/test_cuda_compressors.cpp). One thread rotates
// one piece of a row with the per-piece function the CPU calls
// (kernels/hadamard.h: sign flips, the butterflies in the same order, one product).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"

namespace occ::kernels::cuda {

namespace {

__global__ void rotate_rows_kernel(const float* in, float* out, int64_t n, int64_t c, int block, uint64_t key,
                                   bool inverse) {
  const int64_t pieces = rotation_pieces_per_row(c, block);
  for (int64_t at = global_thread(); at < n * pieces; at += grid_threads()) {
    const int64_t i = at / pieces, p = at % pieces;
    int64_t start = 0;
    int len = 0;
    rotation_piece(c, block, p, &start, &len);
    rotate_piece(in + i * c + start, out + i * c + start, len, key, i, start, inverse);
  }
}

}  // namespace

void CudaOps::rotate_rows(const float* in, float* out, int64_t n, int64_t c, int block, uint64_t key, bool inverse) {
  if (n <= 0 || c <= 0) return;
  const int64_t pieces = n * rotation_pieces_per_row(c, block);
  rotate_rows_kernel<<<grid_for(pieces, 128), 128, 0, stream_>>>(in, out, n, c, block, key, inverse);
  OCC_CUDA_CHECK_LAUNCH();
}

}  // namespace occ::kernels::cuda
