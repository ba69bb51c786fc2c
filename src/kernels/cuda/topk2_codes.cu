// The CUDA twin of kernels/topk2_codes.cpp: top-k with 2-bit values, the wire
// byte for byte the CPU's and the decode value for value
// (tests/cuda/test_cuda_low_bit_twins.cpp). The CPU's order (per chunk, the
// magnitude bits descending, ties to the lower index) from one stable radix
// sort (CUB) of the keys (chunk, 0x7fffffff - |x| bits) with the offsets in
// their chunk; then one block per chunk: its first k entries in that order are
// sent, the first floor(k / 2) high, one thread sums the two levels' means in
// double in the CPU's (rank) order, and the threads place the sent entries'
// index and code bits in index order (a block prefix sum of the counts) with
// atomicOr, as chunks may share a word of the bit strings.
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>

#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"

namespace occ::kernels::cuda {

namespace {

constexpr int kTopk2Threads = 256;
constexpr int kTopk2PerThread = int(kTopk2Chunk) / kTopk2Threads;  // 16 consecutive offsets per thread
static_assert(kTopk2PerThread * kTopk2Threads == int(kTopk2Chunk), "a chunk is the block's threads' offsets");

size_t topk2_aligned(size_t bytes) { return (bytes + 255) & ~size_t(255); }

__global__ void topk2_keys_kernel(const float* m, int64_t n, uint64_t* keys, uint32_t* offsets) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int64_t c = i / kTopk2Chunk;
    keys[i] = (uint64_t(c) << 32) | uint64_t(0x7fffffffu - topk2_magnitude(m[i]));
    offsets[i] = uint32_t(i - c * kTopk2Chunk);
  }
}

// nbits of v at bit `bit` of the wire's words (the wire's bytes read as one LSB-first bit string).
__device__ __forceinline__ void topk2_or_bits(uint32_t* words, int64_t bit, uint32_t v) {
  const uint64_t w = uint64_t(v) << (bit & 31);
  if (uint32_t(w)) atomicOr(words + (bit >> 5), uint32_t(w));
  if (w >> 32) atomicOr(words + (bit >> 5) + 1, uint32_t(w >> 32));
}

// One block (kTopk2Threads threads) per chunk. ranked: the chunk's offsets in the CPU's order.
__global__ void topk2_encode_kernel(const float* m, uint32_t* wire, int64_t n, const uint32_t* ranked_all,
                                    int64_t k_full, int64_t k_last, int b, int64_t index_bit0, int64_t code_bit0) {
  __shared__ uint8_t code_of[kTopk2Chunk];  // 0: not sent, else 1 + its code
  __shared__ typename cub::BlockScan<int, kTopk2Threads>::TempStorage scan_storage;
  const int64_t c = blockIdx.x, nc = topk2_chunks(n);
  const int64_t k = c + 1 == nc ? k_last : k_full, high = k / 2;
  const float* x = m + c * kTopk2Chunk;
  const uint32_t* ranked = ranked_all + c * kTopk2Chunk;
  for (int j = threadIdx.x; j < int(kTopk2Chunk); j += blockDim.x) code_of[j] = 0;
  __syncthreads();
  for (int64_t r = threadIdx.x; r < k; r += blockDim.x) {
    const uint32_t i = ranked[r];
    code_of[i] = uint8_t(1u + ((float_bits(x[i]) >> 31) | (r < high ? 2u : 0u)));  // bit 0: the sign (also of -0)
  }
  if (threadIdx.x == 0) {  // the levels: sums in double in rank order, as the CPU's
    double sum_hi = 0, sum_lo = 0;
    bool finite = true;
    for (int64_t r = 0; r < k; ++r) {
      const float v = x[ranked[r]];
      finite = finite && topk2_magnitude(v) < 0x7f800000u;
      if (r < high) sum_hi += fabs(double(v));
      else sum_lo += fabs(double(v));
    }
    const uint16_t lo = finite ? topk2_level(sum_lo, k - high) : kTopk2Nan;
    const uint16_t hi = finite ? topk2_level(sum_hi, high) : kTopk2Nan;
    wire[c] = uint32_t(lo) | (uint32_t(hi) << 16);  // lo, hi as little-endian bf16
  }
  __syncthreads();
  const int first = threadIdx.x * kTopk2PerThread;
  int count = 0;
  for (int j = 0; j < kTopk2PerThread; ++j) count += code_of[first + j] != 0;
  int before = 0;
  cub::BlockScan<int, kTopk2Threads>(scan_storage).ExclusiveSum(count, before);
  int64_t pos = c * k_full + before;  // every chunk before c is full: k_full entries each
  for (int j = 0; j < kTopk2PerThread; ++j) {
    const uint32_t code = code_of[first + j];
    if (code == 0) continue;
    topk2_or_bits(wire, index_bit0 + pos * b, uint32_t(first + j));
    topk2_or_bits(wire, code_bit0 + pos * 2, code - 1u);
    ++pos;
  }
}

// One thread per sent entry; out zeroed before. An index outside its chunk
// (possible only in a short last chunk) is skipped and flagged.
__global__ void topk2_decode_kernel(const uint8_t* wire, float* out, int64_t n, int64_t K, int b, int64_t k_full,
                                    unsigned* bad) {
  const int64_t nc = topk2_chunks(n);
  const uint8_t* indices = wire + topk2_indices_offset(n);
  const uint8_t* codes = wire + topk2_codes_offset(n, K, b);
  for (int64_t pos = global_thread(); pos < K; pos += grid_threads()) {
    int64_t c = pos / k_full;
    if (c >= nc) c = nc - 1;
    const float lo = bf16_value(uint16_t(wire[4 * c] | (wire[4 * c + 1] << 8)));
    const float hi = bf16_value(uint16_t(wire[4 * c + 2] | (wire[4 * c + 3] << 8)));
    const uint32_t i = topk2_get_bits(indices, pos * b, b), code = topk2_get_bits(codes, pos * 2, 2);
    if (int64_t(i) >= topk2_chunk_len(n, c)) {
      atomicOr(bad, 1u);
      continue;
    }
    out[c * kTopk2Chunk + i] = topk2_value(code, lo, hi);
  }
}

}  // namespace

void CudaOps::encode_topk2(const float* m, float* wire, int64_t n, double density) {
  if (n <= 0) return;
  const int64_t nc = topk2_chunks(n), K = topk2_selected(n, density);
  const int b = topk2_index_bits(n);
  const int64_t k_full = topk2_k(kTopk2Chunk, density), k_last = topk2_k(topk2_chunk_len(n, nc - 1), density);
  OCC_CUDA_CHECK(cudaMemsetAsync(wire, 0, size_t(words_for_bytes(topk2_wire_bytes(n, density))) * 4, stream_));
  int chunk_bits = 0;  // the sort's key bits above the magnitude's 32
  while ((int64_t(1) << chunk_bits) < nc) ++chunk_bits;
  size_t temp_bytes = 0;
  OCC_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, static_cast<const uint64_t*>(nullptr),
                                                 static_cast<uint64_t*>(nullptr), static_cast<const uint32_t*>(nullptr),
                                                 static_cast<uint32_t*>(nullptr), n, 0, 32 + chunk_bits, stream_));
  const size_t keys = topk2_aligned(size_t(n) * 8), offsets = topk2_aligned(size_t(n) * 4);
  char* at = static_cast<char*>(scratch(2 * keys + 2 * offsets + topk2_aligned(temp_bytes)));
  uint64_t* keys_in = reinterpret_cast<uint64_t*>(at);
  uint64_t* keys_out = reinterpret_cast<uint64_t*>(at + keys);
  uint32_t* offsets_in = reinterpret_cast<uint32_t*>(at + 2 * keys);
  uint32_t* offsets_out = reinterpret_cast<uint32_t*>(at + 2 * keys + offsets);
  void* temp = at + 2 * keys + 2 * offsets;
  topk2_keys_kernel<<<grid_for(n), kBlock, 0, stream_>>>(m, n, keys_in, offsets_in);
  OCC_CUDA_CHECK_LAUNCH();
  OCC_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, static_cast<const uint64_t*>(keys_in), keys_out,
                                                 static_cast<const uint32_t*>(offsets_in), offsets_out, n, 0,
                                                 32 + chunk_bits, stream_));
  const int64_t index_bit0 = 8 * topk2_indices_offset(n), code_bit0 = 8 * topk2_codes_offset(n, K, b);
  topk2_encode_kernel<<<unsigned(nc), kTopk2Threads, 0, stream_>>>(m, reinterpret_cast<uint32_t*>(wire), n,
                                                                   offsets_out, k_full, k_last, b, index_bit0,
                                                                   code_bit0);
  OCC_CUDA_CHECK_LAUNCH();
}

void CudaOps::decode_topk2(const float* wire, float* out, int64_t n, double density) {
  if (n <= 0) return;
  const int64_t nc = topk2_chunks(n), K = topk2_selected(n, density), len_last = topk2_chunk_len(n, nc - 1);
  const int b = topk2_index_bits(n);
  const int64_t k_full = topk2_k(kTopk2Chunk, density);
  unsigned* bad = static_cast<unsigned*>(scratch(sizeof(unsigned)));
  OCC_CUDA_CHECK(cudaMemsetAsync(bad, 0, sizeof(unsigned), stream_));
  OCC_CUDA_CHECK(cudaMemsetAsync(out, 0, size_t(n) * sizeof(float), stream_));
  topk2_decode_kernel<<<grid_for(K), kBlock, 0, stream_>>>(reinterpret_cast<const uint8_t*>(wire), out, n, K, b,
                                                           k_full, bad);
  OCC_CUDA_CHECK_LAUNCH();
  // The CPU's check (kernels/topk2_codes.cpp), where b bits can name an offset past
  // the last chunk: one wait per message then, none for whole chunks.
  if ((int64_t(1) << b) <= len_last) return;
  unsigned host_bad = 0;
  OCC_CUDA_CHECK(cudaMemcpyAsync(&host_bad, bad, sizeof(unsigned), cudaMemcpyDeviceToHost, stream_));
  OCC_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (host_bad != 0)  // (core/error.h's {fmt} does not compile under nvcc)
    throw_error("topk2: an index outside its last chunk of " + std::to_string(len_last) +
                " values (a corrupt message)");
}

}  // namespace occ::kernels::cuda
