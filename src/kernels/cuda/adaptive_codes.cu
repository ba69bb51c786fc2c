// The CUDA twin of kernels/adaptive_codes.cpp: the adaptive codec's wire, byte
// for byte the CPU's, and its decode, value for value
// (tests/cuda/test_cuda_low_bit_twins.cpp). The choice of the high tiles:
// one thread sums a tile's energy with the CPU's function (adaptive_codes.h:
// the same double sum in the same order), a stable radix sort (CUB) of the
// keys ~bits(energy) with the tile indices puts the largest energy first and
// ties in tile order, and the first H are high. A tile's place in its code
// section is an exclusive prefix sum of the high flags; then one thread packs
// (or unpacks) one tile with the per-tile functions the CPU calls.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"

namespace occ::kernels::cuda {

namespace {

namespace ad = occ::kernels::adaptive;

// The scratch of one encode or decode: T-long arrays and CUB's temporary storage.
struct AdaptiveScratch {
  uint64_t* keys_in = nullptr;
  uint64_t* keys_out = nullptr;
  int64_t* order_in = nullptr;
  int64_t* order_out = nullptr;
  int64_t* flags = nullptr;  // 1: the tile is high
  int64_t* rank = nullptr;   // high tiles before it
  void* temp = nullptr;
  size_t temp_bytes = 0;
};

size_t adaptive_aligned(size_t bytes) { return (bytes + 255) & ~size_t(255); }

AdaptiveScratch adaptive_scratch(CudaOps& ops, int64_t T, bool sort) {
  AdaptiveScratch s;
  size_t sort_bytes = 0, scan_bytes = 0;
  if (sort)
    OCC_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, static_cast<const uint64_t*>(nullptr),
                                                   static_cast<uint64_t*>(nullptr), static_cast<const int64_t*>(nullptr),
                                                   static_cast<int64_t*>(nullptr), T, 0, 64, ops.stream()));
  OCC_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, static_cast<const int64_t*>(nullptr),
                                               static_cast<int64_t*>(nullptr), T, ops.stream()));
  s.temp_bytes = sort_bytes > scan_bytes ? sort_bytes : scan_bytes;
  const size_t array = adaptive_aligned(size_t(T) * 8);
  const int arrays = sort ? 6 : 2;
  char* at = static_cast<char*>(ops.scratch(array * arrays + adaptive_aligned(s.temp_bytes)));
  s.flags = reinterpret_cast<int64_t*>(at), at += array;
  s.rank = reinterpret_cast<int64_t*>(at), at += array;
  if (sort) {
    s.keys_in = reinterpret_cast<uint64_t*>(at), at += array;
    s.keys_out = reinterpret_cast<uint64_t*>(at), at += array;
    s.order_in = reinterpret_cast<int64_t*>(at), at += array;
    s.order_out = reinterpret_cast<int64_t*>(at), at += array;
  }
  s.temp = at;
  return s;
}

// Energies are >= +0 or +inf, whose bits order as their values: ~bits ascending is energy descending.
__global__ void adaptive_energy_kernel(const float* m, int64_t c, int64_t nb, int64_t T, uint64_t* keys,
                                       int64_t* order) {
  for (int64_t t = global_thread(); t < T; t += grid_threads()) {
    const int64_t i = t / nb, b = t % nb;
    const double e = ad::tile_energy(m + i * c + b * ad::kTile, ad::tile_len(c, b));
    keys[t] = ~uint64_t(__double_as_longlong(e));
    order[t] = t;
  }
}

__global__ void adaptive_mark_kernel(const int64_t* order, int64_t h, int64_t* flags) {
  for (int64_t r = global_thread(); r < h; r += grid_threads()) flags[order[r]] = 1;
}

// One thread per byte of the bit map (no two threads write one byte).
__global__ void adaptive_map_kernel(const int64_t* flags, int64_t T, uint8_t* map) {
  for (int64_t at = global_thread(); at < ad::map_bytes(T); at += grid_threads()) {
    uint32_t v = 0;
    for (int k = 0; k < 8 && at * 8 + k < T; ++k) v |= uint32_t(flags[at * 8 + k]) << k;
    map[at] = uint8_t(v);
  }
}

__global__ void adaptive_encode_kernel(const float* m, uint8_t* wire, int64_t c, int64_t nb, int64_t T, int64_t h,
                                       const int64_t* flags, const int64_t* rank, bool stochastic, uint64_t key) {
  uint8_t* scales = wire + ad::scales_offset(T);
  uint8_t* high_codes = wire + ad::high_codes_offset(T);
  uint8_t* low_codes = wire + ad::low_codes_offset(T, h);
  for (int64_t t = global_thread(); t < T; t += grid_threads()) {
    const int64_t i = t / nb, b = t % nb;
    const bool high = flags[t] != 0;
    uint8_t* codes = high ? high_codes + ad::kHighCodeBytes * rank[t] : low_codes + ad::kLowCodeBytes * (t - rank[t]);
    ad::encode_tile(high ? ad::kHigh : ad::kLow, stochastic, key, m + i * c + b * ad::kTile, ad::tile_len(c, b),
                    uint64_t(t), scales + ad::kScaleBytes * t, codes);
  }
}

__global__ void adaptive_flags_kernel(const uint8_t* map, int64_t T, int64_t* flags) {
  for (int64_t t = global_thread(); t < T; t += grid_threads()) flags[t] = (map[t >> 3] >> (t & 7)) & 1u;
}

// A map that marks more (or fewer) than H tiles high is corrupt: the tiles past
// their section's end decode to NaN (nothing read out of bounds) and the host throws.
__global__ void adaptive_decode_kernel(const uint8_t* wire, float* out, int64_t c, int64_t nb, int64_t T, int64_t h,
                                       const int64_t* flags, const int64_t* rank) {
  const uint8_t* scales = wire + ad::scales_offset(T);
  const uint8_t* high_codes = wire + ad::high_codes_offset(T);
  const uint8_t* low_codes = wire + ad::low_codes_offset(T, h);
  for (int64_t t = global_thread(); t < T; t += grid_threads()) {
    const int64_t i = t / nb, b = t % nb;
    const bool high = flags[t] != 0;
    const int64_t place = high ? rank[t] : t - rank[t];
    float* y = out + i * c + b * ad::kTile;
    const int len = ad::tile_len(c, b);
    if (place >= (high ? h : T - h)) {
      for (int j = 0; j < len; ++j) y[j] = bits_float(0x7fc00000u);
      continue;
    }
    const uint8_t* codes = high ? high_codes + ad::kHighCodeBytes * place : low_codes + ad::kLowCodeBytes * place;
    ad::decode_tile(high ? ad::kHigh : ad::kLow, scales + ad::kScaleBytes * t, codes, y, len);
  }
}

}  // namespace

void CudaOps::encode_adaptive(const float* m, float* wire, int64_t n, int64_t c, const AdaptiveCoding& coding) {
  if (n <= 0 || c <= 0) return;
  const int64_t nb = ad::tiles_per_row(c), T = n * nb, h = ad::high_tiles(T, coding.high_fraction);
  // The last word first: its bytes after the last code stay zero (the kernels write the rest).
  const int64_t words = words_for_bytes(ad::wire_bytes(n, c, coding.high_fraction));
  OCC_CUDA_CHECK(cudaMemsetAsync(wire + (words - 1), 0, 4, stream_));
  const AdaptiveScratch s = adaptive_scratch(*this, T, h > 0);
  OCC_CUDA_CHECK(cudaMemsetAsync(s.flags, 0, size_t(T) * 8, stream_));
  if (h > 0) {
    adaptive_energy_kernel<<<grid_for(T, 128), 128, 0, stream_>>>(m, c, nb, T, s.keys_in, s.order_in);
    OCC_CUDA_CHECK_LAUNCH();
    size_t temp_bytes = s.temp_bytes;
    OCC_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(s.temp, temp_bytes, static_cast<const uint64_t*>(s.keys_in),
                                                   s.keys_out, static_cast<const int64_t*>(s.order_in), s.order_out, T,
                                                   0, 64, stream_));
    adaptive_mark_kernel<<<grid_for(h), kBlock, 0, stream_>>>(s.order_out, h, s.flags);
    OCC_CUDA_CHECK_LAUNCH();
  }
  size_t temp_bytes = s.temp_bytes;
  OCC_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(s.temp, temp_bytes, static_cast<const int64_t*>(s.flags), s.rank, T,
                                               stream_));
  uint8_t* bytes = reinterpret_cast<uint8_t*>(wire);
  adaptive_map_kernel<<<grid_for(ad::map_bytes(T)), kBlock, 0, stream_>>>(s.flags, T, bytes);
  OCC_CUDA_CHECK_LAUNCH();
  adaptive_encode_kernel<<<grid_for(T, 128), 128, 0, stream_>>>(m, bytes, c, nb, T, h, s.flags, s.rank,
                                                                 coding.stochastic, coding.key);
  OCC_CUDA_CHECK_LAUNCH();
}

void CudaOps::decode_adaptive(const float* wire, float* out, int64_t n, int64_t c, double high_fraction) {
  if (n <= 0 || c <= 0) return;
  const int64_t nb = ad::tiles_per_row(c), T = n * nb, h = ad::high_tiles(T, high_fraction);
  const AdaptiveScratch s = adaptive_scratch(*this, T, false);
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(wire);
  adaptive_flags_kernel<<<grid_for(T), kBlock, 0, stream_>>>(bytes, T, s.flags);
  OCC_CUDA_CHECK_LAUNCH();
  size_t temp_bytes = s.temp_bytes;
  OCC_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(s.temp, temp_bytes, static_cast<const int64_t*>(s.flags), s.rank, T,
                                               stream_));
  adaptive_decode_kernel<<<grid_for(T, 128), 128, 0, stream_>>>(bytes, out, c, nb, T, h, s.flags, s.rank);
  OCC_CUDA_CHECK_LAUNCH();
  // The CPU's check of the bit map (kernels/adaptive_codes.cpp): H tiles high. One wait per message.
  int64_t last[2] = {0, 0};
  OCC_CUDA_CHECK(cudaMemcpyAsync(&last[0], s.rank + (T - 1), 8, cudaMemcpyDeviceToHost, stream_));
  OCC_CUDA_CHECK(cudaMemcpyAsync(&last[1], s.flags + (T - 1), 8, cudaMemcpyDeviceToHost, stream_));
  OCC_CUDA_CHECK(cudaStreamSynchronize(stream_));
  const int64_t marked = last[0] + last[1];
  if (marked != h)  // (core/error.h's {fmt} does not compile under nvcc)
    throw_error("corrupt adaptive message: its bit map marks more than " + std::to_string(marked > h ? h : T - h) +
                (marked > h ? " tiles high" : " tiles low"));
}

}  // namespace occ::kernels::cuda
