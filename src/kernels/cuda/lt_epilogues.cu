// Separate-kernel epilogues of the cuBLASLt linear layers (lt_epilogues.h).
// They run only where cuBLASLt cannot fuse a case, so they favour plainness:
// one grid-stride loop per element with the formats decided per element.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/lt_epilogues.h"
#include "kernels/cuda/reduce.cuh"

namespace occ::kernels::cuda {

namespace {

__device__ __forceinline__ float load_value(const void* p, int64_t i, Precision f) {
  if (f == Precision::Bf16) return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  if (f == Precision::Fp16) return __half2float(static_cast<const __half*>(p)[i]);
  return static_cast<const float*>(p)[i];
}

// Round-to-nearest-even, as core/precision.h and cuBLASLt's outputs.
__device__ __forceinline__ void store_value(void* p, int64_t i, Precision f, float v) {
  if (f == Precision::Bf16)
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
  else if (f == Precision::Fp16)
    static_cast<__half*>(p)[i] = __float2half_rn(v);
  else
    static_cast<float*>(p)[i] = v;
}

// GeLU, tanh approximation: the formulas and constants of kernels/elementwise.cpp
// (and elementwise.cu, whose kernels take fp32 buffers only).
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluC = 0.044715f;

__device__ __forceinline__ float gelu_tanh(float x) {
  return 0.5f * x * (1.0f + tanhf(kGeluK * (x + kGeluC * x * x * x)));
}
__device__ __forceinline__ float gelu_tanh_grad(float x) {
  const float t = tanhf(kGeluK * (x + kGeluC * x * x * x));
  const float dt = (1.0f - t * t) * kGeluK * (1.0f + 3.0f * kGeluC * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * dt;
}

__global__ void forward_epilogue_kernel(void* out, Precision out_format, void* pre_gelu, const float* acc,
                                        const void* bias, Precision bias_format, int64_t N, int64_t OC) {
  for (int64_t i = global_thread(); i < N * OC; i += grid_threads()) {
    float x = acc ? acc[i] : 0.0f;
    if (bias) x += load_value(bias, i % OC, bias_format);
    if (pre_gelu) {
      store_value(pre_gelu, i, out_format, x);
      x = gelu_tanh(x);
    }
    store_value(out, i, out_format, x);
  }
}

// The GeLU-gradient product of element i (fp32), shared by the output kernel and the column sums.
struct GeluGradProduct {
  const float* acc;
  const void* pre_gelu;
  Precision pre_format;
  int64_t C;
  __device__ __forceinline__ float at(int64_t i) const {
    return acc ? acc[i] * gelu_tanh_grad(load_value(pre_gelu, i, pre_format)) : 0.0f;
  }
  // As a column_sums_add functor over [N, C].
  __device__ __forceinline__ void operator()(int64_t n, int64_t c, float (&v)[1]) const { v[0] = at(n * C + c); }
};

__global__ void gelu_backward_epilogue_kernel(void* dinp, Precision dinp_format, bool accumulate, GeluGradProduct g,
                                              int64_t total) {
  for (int64_t i = global_thread(); i < total; i += grid_threads()) {
    const float v = g.at(i);
    store_value(dinp, i, dinp_format, accumulate ? load_value(dinp, i, dinp_format) + v : v);
  }
}

struct RowsOfFormat {  // the rows of x[N, C] in `format`, as a column_sums_add functor
  const void* x;
  Precision format;
  int64_t C;
  __device__ __forceinline__ void operator()(int64_t n, int64_t c, float (&v)[1]) const {
    v[0] = load_value(x, n * C + c, format);
  }
};

__global__ void add_into_kernel(float* dst, const void* src, Precision src_format, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) dst[i] += load_value(src, i, src_format);
}

}  // namespace

void lt_forward_epilogue(CudaOps& ops, void* out, Precision out_format, void* pre_gelu, const float* acc,
                         const void* bias, Precision bias_format, int64_t N, int64_t OC) {
  if (N <= 0 || OC <= 0) return;
  forward_epilogue_kernel<<<grid_for(N * OC), kBlock, 0, ops.stream()>>>(out, out_format, pre_gelu, acc, bias,
                                                                          bias_format, N, OC);
  OCC_CUDA_CHECK_LAUNCH();
}

void lt_gelu_backward_epilogue(CudaOps& ops, void* dinp, Precision dinp_format, bool accumulate, const float* acc,
                               const void* pre_gelu, Precision pre_format, float* dbias, int64_t N, int64_t C) {
  if (N <= 0 || C <= 0) return;
  const GeluGradProduct g{acc, pre_gelu, pre_format, C};
  gelu_backward_epilogue_kernel<<<grid_for(N * C), kBlock, 0, ops.stream()>>>(dinp, dinp_format, accumulate, g,
                                                                              N * C);
  OCC_CUDA_CHECK_LAUNCH();
  if (dbias) column_sums_add<1>(ops, ColumnOutputs<1>{{dbias}}, g, N, C);
}

void lt_column_sums_add(CudaOps& ops, float* sums, const void* x, Precision format, int64_t N, int64_t C) {
  column_sums_add<1>(ops, ColumnOutputs<1>{{sums}}, RowsOfFormat{x, format, C}, N, C);
}

void lt_add_into(CudaOps& ops, float* dst, const void* src, Precision src_format, int64_t n) {
  if (n <= 0) return;
  add_into_kernel<<<grid_for(n), kBlock, 0, ops.stream()>>>(dst, src, src_format, n);
  OCC_CUDA_CHECK_LAUNCH();
}

}  // namespace occ::kernels::cuda
