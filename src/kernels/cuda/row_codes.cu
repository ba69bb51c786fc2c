// The CUDA twin of kernels/row_codes.cpp: the byte compressors' wires, byte
// for byte the CPU's (tests/cuda/test_cuda_compressors.cpp).
//   int8 / fp8: the absmax is a maximum (exact in any order); the division and
//     the conversions (row_codes.h, shared with the CPU) are exact.
//   sign: each row's scale is summed by one thread in column order, in double,
//     as the CPU sums it; each byte of bits is built from its 8 entries.
//   top-k: one block per row finds the k-th largest magnitude key by a radix
//     select (four 8-bit digits, integer counts), then walks the row in column
//     order with block scans, keeping the keys above it and the first
//     `remaining` equal to it: the CPU's total order, so the same entries, in
//     the same (column) order.
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

// ---- sign ----

__global__ void sign_scales_kernel(const float* m, float* wire, int64_t n, int64_t c) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float* x = m + i * c;
    double sum = 0.0;
    for (int64_t j = 0; j < c; ++j) sum += isnan(x[j]) ? 0.0 : fabs(double(x[j]));
    wire[i] = float(sum / double(c));
  }
}

__global__ void sign_bits_kernel(const float* m, unsigned char* bits, int64_t total) {
  const int64_t nbytes = bytes_for_bits(total);
  for (int64_t b = global_thread(); b < nbytes; b += grid_threads()) {
    unsigned v = 0;
    const int64_t first = 8 * b, last = first + 8 < total ? first + 8 : total;
    for (int64_t p = first; p < last; ++p) v |= unsigned(m[p] < 0.0f) << (p - first);
    bits[b] = static_cast<unsigned char>(v);
  }
}

__global__ void sign_decode_kernel(const float* wire, float* out, int64_t n, int64_t c) {
  const unsigned char* bits = reinterpret_cast<const unsigned char*>(wire) + 4 * n;
  for (int64_t p = global_thread(); p < n * c; p += grid_threads()) {
    const float scale = wire[p / c];
    out[p] = ((bits[p >> 3] >> (p & 7)) & 1u) ? -scale : scale;
  }
}

// ---- top-k ----

constexpr int kTopkThreads = 256;

// Exclusive prefix sum of v over the block (in thread order); *total gets the
// block's sum. Integer sums: exact in any order.
__device__ int block_exclusive_scan(int v, int* total) {
  __shared__ int warp_sums[kTopkThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int incl = v;
  for (int o = 1; o < 32; o <<= 1) {
    const int t = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += t;
  }
  __syncthreads();  // the previous call's readers of warp_sums are done
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  int base = 0, sum = 0;
  for (int w = 0; w < kTopkThreads / 32; ++w) {
    base += w < warp ? warp_sums[w] : 0;
    sum += warp_sums[w];
  }
  *total = sum;
  return base + incl - v;
}

__device__ __forceinline__ uint32_t magnitude_key(float v) { return __float_as_uint(v) & 0x7fffffffu; }

__global__ void __launch_bounds__(kTopkThreads)
    topk_encode_kernel(const float* m, float* wire, int64_t n, int64_t c, int64_t k, bool bitmap) {
  const int64_t i = blockIdx.x;
  const float* x = m + i * c;
  // Radix select, most significant digit first: after the four passes `prefix`
  // is the k-th largest key, and `remaining` how many of the entries equal to
  // it are kept (those above it all are).
  __shared__ unsigned hist[256];
  __shared__ uint32_t s_prefix;
  __shared__ int64_t s_remaining;
  uint32_t prefix = 0, mask = 0;
  int64_t remaining = k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int d = threadIdx.x; d < 256; d += blockDim.x) hist[d] = 0;
    __syncthreads();
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
      const uint32_t key = magnitude_key(x[j]);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int d = 255;
      for (; d > 0 && int64_t(hist[d]) < remaining; --d) remaining -= hist[d];
      s_prefix = prefix | (uint32_t(d) << shift);
      s_remaining = remaining;
    }
    __syncthreads();
    prefix = s_prefix;
    remaining = s_remaining;
    mask |= 255u << shift;
  }
  // The kept entries in column order: a tile of the row at a time.
  float* values = wire + i * k;
  int32_t* indices = reinterpret_cast<int32_t*>(reinterpret_cast<unsigned char*>(wire) + 4 * n * k) + i * k;
  const int64_t map_bytes = bytes_for_bits(c);
  unsigned char* map = reinterpret_cast<unsigned char*>(wire) + 4 * n * k + i * map_bytes;
  int64_t equal_base = 0, kept_base = 0;
  for (int64_t j0 = 0; j0 < c; j0 += kTopkThreads) {
    const int64_t j = j0 + threadIdx.x;
    const bool valid = j < c;
    const uint32_t key = valid ? magnitude_key(x[j]) : 0u;
    const bool equal = valid && key == prefix;
    int equal_total = 0, kept_total = 0;
    const int equal_before = block_exclusive_scan(equal ? 1 : 0, &equal_total);
    const bool kept = valid && (key > prefix || (equal && equal_base + equal_before < remaining));
    const int kept_before = block_exclusive_scan(kept ? 1 : 0, &kept_total);
    if (kept) {
      const int64_t t = kept_base + kept_before;
      values[t] = x[j];
      if (!bitmap) indices[t] = int32_t(j);
    }
    if (bitmap) {  // each warp's 32 entries are 4 whole bytes of the map (j0 is a multiple of 256)
      const unsigned bits = __ballot_sync(0xffffffffu, kept);
      const int lane = threadIdx.x & 31;
      const int64_t byte = (j0 + (threadIdx.x - lane)) / 8 + lane;
      if (lane < 4 && byte < map_bytes) map[byte] = static_cast<unsigned char>(bits >> (8 * lane));
    }
    equal_base += equal_total;
    kept_base += kept_total;
  }
}

__global__ void __launch_bounds__(kTopkThreads)
    topk_decode_kernel(const float* wire, float* out, int64_t n, int64_t c, int64_t k, bool bitmap) {
  const int64_t i = blockIdx.x;
  float* row = out + i * c;
  const float* values = wire + i * k;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) row[j] = 0.0f;
  __syncthreads();
  const unsigned char* tail = reinterpret_cast<const unsigned char*>(wire) + 4 * n * k;
  if (!bitmap) {
    const int32_t* indices = reinterpret_cast<const int32_t*>(tail) + i * k;
    for (int64_t t = threadIdx.x; t < k; t += blockDim.x) {
      const int32_t j = indices[t];
      if (j >= 0 && j < c) row[j] = values[t];  // a corrupt index must not write out of bounds
    }
    return;
  }
  // The t-th set bit (in column order) takes value t, for t < k: a byte per thread.
  const int64_t map_bytes = bytes_for_bits(c);
  const unsigned char* map = tail + i * map_bytes;
  int64_t base = 0;
  for (int64_t b0 = 0; b0 < map_bytes; b0 += kTopkThreads) {
    const int64_t b = b0 + threadIdx.x;
    unsigned byte = 0;
    if (b < map_bytes) {
      byte = map[b];
      const int64_t past = c - 8 * b;  // bits at or past column c are not entries
      if (past < 8) byte &= (1u << past) - 1u;
    }
    int total = 0;
    int64_t t = base + block_exclusive_scan(__popc(byte), &total);
    for (int bit = 0; bit < 8; ++bit)
      if ((byte >> bit) & 1u) {
        if (t < k) row[8 * b + bit] = values[t];
        ++t;
      }
    base += total;
  }
}

}  // namespace

void CudaOps::encode_signs(const float* m, float* wire, int64_t n, int64_t c) {
  if (n <= 0 || c <= 0) return;
  const int64_t words = words_for_bytes(sign_code_bytes(n, c));
  OCC_CUDA_CHECK(cudaMemsetAsync(wire + (words - 1), 0, 4, stream_));  // padding first; the bits overwrite the rest
  sign_scales_kernel<<<grid_for(n, 128), 128, 0, stream_>>>(m, wire, n, c);
  OCC_CUDA_CHECK_LAUNCH();
  sign_bits_kernel<<<grid_for(bytes_for_bits(n * c)), kBlock, 0, stream_>>>(m, reinterpret_cast<unsigned char*>(wire) + 4 * n,
                                                                       n * c);
  OCC_CUDA_CHECK_LAUNCH();
}

void CudaOps::decode_signs(const float* wire, float* out, int64_t n, int64_t c) {
  if (n <= 0 || c <= 0) return;
  sign_decode_kernel<<<grid_for(n * c), kBlock, 0, stream_>>>(wire, out, n, c);
  OCC_CUDA_CHECK_LAUNCH();
}

void CudaOps::encode_topk(const float* m, float* wire, int64_t n, int64_t c, int64_t k, bool bitmap) {
  if (n <= 0 || c <= 0 || k <= 0) return;
  const int64_t words = words_for_bytes(topk_code_bytes(n, c, k, bitmap));
  OCC_CUDA_CHECK(cudaMemsetAsync(wire + (words - 1), 0, 4, stream_));  // padding first
  topk_encode_kernel<<<unsigned(n), kTopkThreads, 0, stream_>>>(m, wire, n, c, k, bitmap);
  OCC_CUDA_CHECK_LAUNCH();
}

void CudaOps::decode_topk(const float* wire, float* out, int64_t n, int64_t c, int64_t k, bool bitmap) {
  if (n <= 0 || c <= 0) return;
  topk_decode_kernel<<<unsigned(n), kTopkThreads, 0, stream_>>>(wire, out, n, c, k, bitmap);
  OCC_CUDA_CHECK_LAUNCH();
}

void CudaOps::encode_scaled_rows(const float* m, float* wire, int64_t n, int64_t c, RowCode code) {
  if (n <= 0 || c <= 0) return;
  // The last word first: its bytes after the last code stay zero (the kernel writes the codes over the rest).
  const int64_t words = words_for_bytes(row_code_bytes(n, c));
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
