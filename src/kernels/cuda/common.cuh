#pragma once
// Device-side helpers shared by the CUDA kernel files: launch geometry, warp
// and block reductions in a fixed order, and the dropout mask, drawn with the
// same Philox function and indexing as the CPU kernels so that the masks are
// bit-identical (see kernels/elementwise.cpp dropout_row and
// kernels/attention.cpp attention_dropout_row).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "core/rng.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/kernels.h"

namespace occ::kernels::cuda {

// Threads per block of the elementwise and per-row kernels.
constexpr int kBlock = 256;

// Blocks for a grid-stride loop over n items. The cap keeps the grid legal;
// the kernels loop, so any count is correct.
inline unsigned grid_for(int64_t n, int block = kBlock) {
  int64_t blocks = (n + block - 1) / block;
  if (blocks < 1) blocks = 1;
  if (blocks > (int64_t(1) << 20)) blocks = int64_t(1) << 20;
  return unsigned(blocks);
}

__device__ __forceinline__ int64_t global_thread() { return int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t grid_threads() { return int64_t(gridDim.x) * blockDim.x; }

struct SumOp {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Butterfly reduction: every lane ends with the same value (each step combines
// the same two operands on both partner lanes, and the ops are commutative).
template <class T, class Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
template <class T>
__device__ __forceinline__ T warp_sum(T v) {
  return warp_reduce(v, SumOp{});
}

// Reduction over the whole block (blockDim.x a multiple of 32, at most 1024,
// blockDim.y == 1); every thread must call it and every thread gets the result.
// The combination order depends only on blockDim, so it is deterministic.
template <class T, class Op>
__device__ T block_reduce(T v, Op op, T identity) {
  __shared__ T partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_reduce(v, op);
  __syncthreads();  // a previous call's readers of partial[0] are done
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T w = lane < warps ? partial[lane] : identity;
    w = warp_reduce(w, op);
    if (lane == 0) partial[0] = w;
  }
  __syncthreads();
  return partial[0];
}

// ---- storage formats ------------------------------------------------------------
// A tensor's values are float, __nv_bfloat16 or __half (core/tensor_ref.h). Kernels
// are templates over the storage type S; they compute in fp32, widen on load
// (exact) and round once on store (nearest, ties to even: core/precision.h).
__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float widen(__half x) { return __half2float(x); }
template <class S>
__device__ __forceinline__ S narrow(float x);
template <>
__device__ __forceinline__ float narrow<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 narrow<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ __half narrow<__half>(float x) { return __float2half_rn(x); }

// Calls f(S{}) with S the C++ type of `format` (host side: picks the kernel instantiation).
template <class F>
decltype(auto) with_storage(Precision format, F&& f) {
  switch (format) {
    case Precision::Bf16: return f(__nv_bfloat16{});
    case Precision::Fp16: return f(__half{});
    default: return f(float{});
  }
}
// The format of storage type S (the inverse of with_storage).
template <class S>
constexpr Precision storage_of() {
  if constexpr (std::is_same_v<S, __nv_bfloat16>) return Precision::Bf16;
  else if constexpr (std::is_same_v<S, __half>) return Precision::Fp16;
  else return Precision::Fp32;
}
// The typed pointer behind a reference of storage type S.
template <class S>
S* typed(TensorRef t) {
  return static_cast<S*>(t.data());
}
template <class S>
const S* typed(ConstTensorRef t) {
  return static_cast<const S*>(t.data());
}
// ---- GeLU (tanh approximation, kernels/elementwise.cpp's formula; tanhf agrees with its fast tanh to ~1e-7) ----
__device__ __forceinline__ float gelu_value(float x) {
  constexpr float k = 0.7978845608028654f, c = 0.044715f;  // sqrt(2/pi)
  return 0.5f * x * (1.0f + tanhf(k * (x + c * x * x * x)));
}
// d gelu / dx
__device__ __forceinline__ float gelu_slope(float x) {
  constexpr float k = 0.7978845608028654f, c = 0.044715f;
  const float t = tanhf(k * (x + c * x * x * x));
  const float dt = (1.0f - t * t) * k * (1.0f + 3.0f * c * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * dt;
}

// ---- dropout ----------------------------------------------------------------------
// A dropout site as kernels take it (by value). keep_scale is computed on the
// host exactly as the CPU kernels compute it, 1.0f / (1.0f - p).
struct DropoutParams {
  uint64_t key;
  float p, keep_scale;
  int64_t sample_base;
  int64_t row0;  // kernels::Dropout::row0
  bool active;
};
inline DropoutParams dropout_params(const Dropout& d) {
  return DropoutParams{d.key, d.p, d.active() ? 1.0f / (1.0f - d.p) : 1.0f, d.sample_base, d.row0, d.active()};
}

// Word `lane` (0..3) of a Philox block without dynamic indexing (which would put
// the block in local memory).
__device__ __forceinline__ uint32_t philox_word(const PhiloxBlock& b, int lane) {
  const uint32_t lo = (lane & 1) ? b.v[1] : b.v[0];
  const uint32_t hi = (lane & 1) ? b.v[3] : b.v[2];
  return (lane & 2) ? hi : lo;
}
// The multiplier of a dropout element whose uniform comes from `word`: 0 when
// dropped, keep_scale when kept (keep iff U > p, as on the CPU).
__device__ __forceinline__ float dropout_multiplier(uint32_t word, const DropoutParams& d) {
  return bits_to_unit(word) > d.p ? d.keep_scale : 0.0f;
}

// Visits the elements idx0 .. idx0 + count - 1 of a dropout stream of `sample`
// (one attention row: idx0 = ((head0 + h) * T + tq) * T, count = tq + 1),
// calling f(i, multiplier) for element idx0 + i. The 32 lanes of a warp take
// aligned groups of four indices, each group one Philox block, like the CPU.
template <class F>
__device__ __forceinline__ void warp_for_dropout_row(const DropoutParams& d, uint64_t sample, uint64_t idx0,
                                                     int64_t count, F&& f) {
  if (count <= 0) return;
  const int lane = threadIdx.x & 31;
  const uint64_t first = idx0 >> 2, last = (idx0 + uint64_t(count) - 1) >> 2;
  for (uint64_t g = first + uint64_t(lane); g <= last; g += 32) {
    const PhiloxBlock b = Philox::block(d.key, sample, g);
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const uint64_t idx = 4 * g + uint64_t(r);
      if (idx >= idx0 && idx < idx0 + uint64_t(count)) f(int64_t(idx - idx0), dropout_multiplier(b.v[r], d));
    }
  }
}

}  // namespace occ::kernels::cuda
