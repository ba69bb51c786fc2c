// GeLU (tanh approximation), bias-dropout-add and dropout. Formulas follow
// kernels/elementwise.cpp (which uses a fast tanh; tanhf here agrees to ~1e-7).
// Dropout masks are bit-identical to the CPU's: element (row n, column c) of a
// [N, C] activation with T rows per sample belongs to sample
// sample_base + n / T at index idx = (n % T) * C + c, and is kept iff
// bits_to_unit(Philox(key, sample, idx >> 2)[idx & 3]) > p.
#include "kernels/cuda/reduce.cuh"

namespace occ::kernels::cuda {

namespace {

__global__ void gelu_forward_kernel(float* out, const float* inp, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) out[i] = gelu_value(inp[i]);
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) dinp[i] = dout[i] * gelu_slope(inp[i]);
}

// Calls f(i, c, multiplier) for every element i of [N, C] (c = i % C), with its
// dropout multiplier (0 or 1 / (1 - p)). A sample's T * C elements are
// contiguous, and one thread takes an aligned group of four of them: the four
// uniforms of one Philox block, as the CPU draws them.
template <class F>
__global__ void dropout_map_kernel(F f, DropoutParams d, int64_t N, int64_t T, int64_t C) {
  const int64_t per_sample = T * C, groups = (per_sample + 3) / 4;
  const int64_t samples = (N + T - 1) / T, total = N * C;
  for (int64_t gid = global_thread(); gid < samples * groups; gid += grid_threads()) {
    const int64_t s = gid / groups, j = gid % groups;
    const PhiloxBlock b = Philox::block(d.key, uint64_t(d.sample_base + s), uint64_t(j));
    const int64_t base = s * per_sample;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int64_t idx = 4 * j + r;
      if (idx < per_sample && base + idx < total) f(base + idx, idx % C, dropout_multiplier(b.v[r], d));
    }
  }
}

template <class F>
void launch_dropout_map(cudaStream_t stream, F f, const Dropout& d, int64_t N, int64_t T, int64_t C) {
  const int64_t groups = (N + T - 1) / T * ((T * C + 3) / 4);
  dropout_map_kernel<<<grid_for(groups), kBlock, 0, stream>>>(f, dropout_params(d), N, T, C);
  OCC_CUDA_CHECK_LAUNCH();
}

// Without dropout: f(i, c) over [N, C].
template <class F>
__global__ void map_kernel(F f, int64_t total, int64_t C) {
  for (int64_t i = global_thread(); i < total; i += grid_threads()) f(i, i % C);
}

struct BiasDropoutAdd {  // out = residual + (x + bias) * m
  float* out;
  const float *residual, *x, *bias;
  __device__ __forceinline__ void operator()(int64_t i, int64_t c, float m) const {
    out[i] = residual[i] + (x[i] + (bias ? bias[c] : 0.0f)) * m;
  }
};
struct BiasAdd {  // out = residual + x + bias (the CPU's order of additions)
  float* out;
  const float *residual, *x, *bias;
  __device__ __forceinline__ void operator()(int64_t i, int64_t c) const {
    out[i] = residual[i] + x[i] + (bias ? bias[c] : 0.0f);
  }
};
struct ScaleInto {  // dst = src * m (dst may be src)
  float* dst;
  const float* src;
  __device__ __forceinline__ void operator()(int64_t i, int64_t, float m) const { dst[i] = src[i] * m; }
};

}  // namespace

void CudaOps::gelu_forward(TensorRef out, ConstTensorRef inp, int64_t n) {
  if (n <= 0) return;
  gelu_forward_kernel<<<grid_for(n), kBlock, 0, stream_>>>(out.f32(), inp.f32(), n);
  OCC_CUDA_CHECK_LAUNCH();
}

void CudaOps::gelu_backward(TensorRef dinp, ConstTensorRef inp, ConstTensorRef dout, int64_t n) {
  if (n <= 0) return;
  gelu_backward_kernel<<<grid_for(n), kBlock, 0, stream_>>>(dinp.f32(), inp.f32(), dout.f32(), n);
  OCC_CUDA_CHECK_LAUNCH();
}

void CudaOps::bias_dropout_add_forward(TensorRef out, ConstTensorRef residual, ConstTensorRef x, ConstTensorRef bias,
                                       const Dropout& d, int64_t N, int64_t T, int64_t C) {
  if (N <= 0 || C <= 0) return;
  if (d.active()) {
    launch_dropout_map(stream_, BiasDropoutAdd{out.f32(), residual.f32(), x.f32(), bias.f32()}, d, N, T, C);
  } else {
    map_kernel<<<grid_for(N * C), kBlock, 0, stream_>>>(BiasAdd{out.f32(), residual.f32(), x.f32(), bias.f32()},
                                                         N * C, C);
    OCC_CUDA_CHECK_LAUNCH();
  }
}

void CudaOps::bias_dropout_add_backward(TensorRef dx, float* dbias, ConstTensorRef dout, const Dropout& d, int64_t N,
                                        int64_t T, int64_t C) {
  if (N <= 0 || C <= 0) return;
  if (d.active())
    launch_dropout_map(stream_, ScaleInto{dx.f32(), dout.f32()}, d, N, T, C);
  else
    copy(dx, dout, N * C);
  if (dbias) column_sums_add<1>(*this, ColumnOutputs<1>{{dbias}}, DenseRows{dx.f32(), C}, N, C);
}

void CudaOps::dropout_inplace(TensorRef x, const Dropout& d, int64_t N, int64_t T, int64_t C) {
  if (!d.active() || N <= 0 || C <= 0) return;
  launch_dropout_map(stream_, ScaleInto{x.f32(), x.f32()}, d, N, T, C);
}

}  // namespace occ::kernels::cuda
