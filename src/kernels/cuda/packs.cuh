#pragma once
// 128-bit loads and stores for the memory-bound kernels. A "pack" is the
// values of one 16-byte word of a tensor's storage type S (4 fp32 or 8 bf16 /
// fp16 values), widened to fp32 in registers: one load instruction moves 16
// bytes instead of 2 or 4, which is what lets a kernel reach the GPU's memory
// bandwidth. Vector paths need 16-byte aligned addresses (the host checks,
// aligned16) and rows whose width is a whole number of packs; every kernel
// that uses them keeps a scalar path for the rest.
//
// The values a kernel stores are those core/precision.h defines: a 16-bit
// store rounds once (nearest, ties to even) from the fp32 result, and an fp32
// tensor of a --bf16 / --fp16 step (the tests' CPU-style storage) is rounded
// with round_to (stored_value below), so both give the same numbers.
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/common.cuh"

namespace occ::kernels::cuda {

// Values of storage type T in one 16-byte pack.
template <class T>
constexpr int kPack = int(16 / sizeof(T));

__host__ __device__ inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Loads V consecutive values of type T as fp32. V == 1: a scalar load; else
// V * sizeof(T) is a multiple of 16 and p is 16-byte aligned: 16-byte loads.
template <int V, class T>
__device__ __forceinline__ void load_values(const T* p, float (&out)[V]) {
  if constexpr (V == 1) {
    out[0] = widen(p[0]);
  } else {
    static_assert(V * sizeof(T) % 16 == 0, "a pack is a whole number of 16-byte words");
    constexpr int kWords = int(V * sizeof(T) / 16);
    T e[V];
#pragma unroll
    for (int k = 0; k < kWords; ++k) {
      const uint4 word = reinterpret_cast<const uint4*>(p)[k];
      memcpy(reinterpret_cast<char*>(e) + 16 * k, &word, 16);
    }
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = widen(e[j]);
  }
}

// Stores V values as type T (rounded to nearest, ties to even, for 16-bit T;
// exact when they already are values of T). Alignment as load_values.
template <int V, class T>
__device__ __forceinline__ void store_values(T* p, const float (&in)[V]) {
  if constexpr (V == 1) {
    p[0] = narrow<T>(in[0]);
  } else {
    static_assert(V * sizeof(T) % 16 == 0, "a pack is a whole number of 16-byte words");
    constexpr int kWords = int(V * sizeof(T) / 16);
    T e[V];
#pragma unroll
    for (int j = 0; j < V; ++j) e[j] = narrow<T>(in[j]);
#pragma unroll
    for (int k = 0; k < kWords; ++k) {
      uint4 word;
      memcpy(&word, reinterpret_cast<const char*>(e) + 16 * k, 16);
      reinterpret_cast<uint4*>(p)[k] = word;
    }
  }
}

// The value a tensor of storage S holds once v is stored in a step of
// precision p: the 16-bit value nearest to v, or for fp32 storage v rounded to
// p (a no-op in fp32). Kernels that go on computing with a stored tensor
// (LayerNorm of the residual it just wrote) compute with this value.
template <class S>
__device__ __forceinline__ float stored_value(float v, Precision p) {
  if constexpr (std::is_same_v<S, float>)
    return round_to(p, v);
  else
    return widen(narrow<S>(v));
}

// The dropout multipliers (0 or 1 / (1 - p), dropout_multiplier) of V
// consecutive elements of one sample's stream starting at index idx0. V == 1:
// any idx0; else V is a multiple of 4 and idx0 too, so the elements are whole
// Philox blocks, drawn exactly as the CPU draws them.
template <int V>
__device__ __forceinline__ void dropout_multipliers(const DropoutParams& d, uint64_t sample, uint64_t idx0,
                                                    float (&m)[V]) {
  if constexpr (V == 1) {
    m[0] = dropout_multiplier(philox_word(Philox::block(d.key, sample, idx0 >> 2), int(idx0 & 3)), d);
  } else {
    static_assert(V % 4 == 0, "packs cover whole Philox blocks");
#pragma unroll
    for (int g = 0; g < V / 4; ++g) {
      const PhiloxBlock b = Philox::block(d.key, sample, (idx0 >> 2) + uint64_t(g));
#pragma unroll
      for (int r = 0; r < 4; ++r) m[4 * g + r] = dropout_multiplier(b.v[r], d);
    }
  }
}

// Multipliers of the V elements (n, c0 .. c0 + V - 1) of an [N, C] activation
// with T rows per sample (kernels/elementwise.cpp's indexing: sample
// sample_base + n / T, index (n % T) * C + c). For V > 1, C and c0 are
// multiples of V; inactive dropout gives 1.
template <int V>
__device__ __forceinline__ void row_dropout_multipliers(const DropoutParams& d, int64_t n, int64_t c0, int64_t T,
                                                        int64_t C, float (&m)[V]) {
  if (!d.active) {
#pragma unroll
    for (int j = 0; j < V; ++j) m[j] = 1.0f;
    return;
  }
  const int64_t row = d.row0 + n;  // the micro-batch's row (sequence parallelism's shards start at row0)
  dropout_multipliers<V>(d, uint64_t(d.sample_base + row / T), uint64_t((row % T) * C + c0), m);
}

// ---- a map over n values: packs, then a scalar tail -------------------------------------
// f.apply<V>(i) handles the V values from element i. The kernel takes `packs`
// packs of V values from element 0, then the scalar tail [packs * V, n) one by one.
template <int V, class F>
__global__ void packed_map_kernel(F f, int64_t packs, int64_t n) {
  const int64_t items = packs + (n - packs * V);
  for (int64_t q = global_thread(); q < items; q += grid_threads()) {
    if (q < packs)
      f.template apply<V>(q * V);
    else
      f.template apply<1>(packs * V + (q - packs));
  }
}

// Runs f over n values: in packs of V where `vector` (the tensors allow V-value
// loads at element 0, i.e. are 16-byte aligned), else one value per thread.
template <int V, class F>
void launch_packed_map(cudaStream_t stream, F f, int64_t n, bool vector) {
  if (n <= 0) return;
  const int64_t packs = vector ? n / V : 0;
  packed_map_kernel<V><<<grid_for(packs + (n - packs * V)), kBlock, 0, stream>>>(f, packs, n);
  OCC_CUDA_CHECK_LAUNCH();
}

}  // namespace occ::kernels::cuda
