// LayerNorm: one warp per row (rows are independent; C is a few hundred to a
// few thousand, so a warp's lanes stride the row and the row stays in L1
// between passes). Formulas and accumulation conventions are those of
// kernels/layernorm.cpp: two-pass mean/variance, dinp/dw/db accumulate (+=).
#include "kernels/cuda/reduce.cuh"

namespace occ::kernels::cuda {

namespace {

constexpr int kRowsPerBlock = kBlock / 32;

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp, const float* w,
                                         const float* b, int64_t N, int64_t C, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t n = int64_t(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (n >= N) return;  // whole warps leave together: no block-level barrier follows
  const float* x = inp + n * C;
  float* y = out + n * C;
  float sum = 0.0f;
  for (int64_t c = lane; c < C; c += 32) sum += x[c];
  const float m = warp_sum(sum) / float(C);
  float var = 0.0f;
  for (int64_t c = lane; c < C; c += 32) {
    const float dx = x[c] - m;
    var += dx * dx;
  }
  const float s = 1.0f / sqrtf(warp_sum(var) / float(C) + eps);
  for (int64_t c = lane; c < C; c += 32) y[c] = (x[c] - m) * s * w[c] + b[c];
  if (lane == 0) {
    mean[n] = m;
    rstd[n] = s;
  }
}

__global__ void layernorm_backward_input_kernel(float* dinp, const float* dout, const float* inp, const float* w,
                                                const float* mean, const float* rstd, int64_t N, int64_t C) {
  const int lane = threadIdx.x & 31;
  const int64_t n = int64_t(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (n >= N) return;
  const float* dy = dout + n * C;
  const float* x = inp + n * C;
  float* dx = dinp + n * C;
  const float m = mean[n], s = rstd[n];
  float sum_g = 0.0f, sum_gx = 0.0f;
  for (int64_t c = lane; c < C; c += 32) {
    const float g = dy[c] * w[c];
    sum_g += g;
    sum_gx += g * (x[c] - m) * s;
  }
  sum_g = warp_sum(sum_g) / float(C);
  sum_gx = warp_sum(sum_gx) / float(C);
  for (int64_t c = lane; c < C; c += 32) {
    const float xhat = (x[c] - m) * s;
    dx[c] += s * (dy[c] * w[c] - sum_g - xhat * sum_gx);
  }
}

// dw[c] += dy * xhat, db[c] += dy, as column sums.
struct LayerNormParamGrads {
  const float *dout, *inp, *mean, *rstd;
  int64_t C;
  __device__ __forceinline__ void operator()(int64_t n, int64_t c, float (&v)[2]) const {
    const float dy = dout[n * C + c];
    v[0] = dy * (inp[n * C + c] - mean[n]) * rstd[n];
    v[1] = dy;
  }
};

}  // namespace

void CudaOps::layernorm_forward(TensorRef out, float* mean, float* rstd, ConstTensorRef inp, ConstTensorRef w,
                                ConstTensorRef b, int64_t N, int64_t C, float eps) {
  if (N <= 0) return;
  const int64_t blocks = (N + kRowsPerBlock - 1) / kRowsPerBlock;
  layernorm_forward_kernel<<<unsigned(blocks), kBlock, 0, stream_>>>(out.f32(), mean, rstd, inp.f32(), w.f32(),
                                                                      b.f32(), N, C, eps);
  OCC_CUDA_CHECK_LAUNCH();
}

void CudaOps::layernorm_backward(TensorRef dinp, float* dw, float* db, ConstTensorRef dout, ConstTensorRef inp,
                                 ConstTensorRef w, const float* mean, const float* rstd, int64_t N, int64_t C) {
  if (N <= 0) return;
  if (dinp) {
    const int64_t blocks = (N + kRowsPerBlock - 1) / kRowsPerBlock;
    layernorm_backward_input_kernel<<<unsigned(blocks), kBlock, 0, stream_>>>(dinp.f32(), dout.f32(), inp.f32(),
                                                                              w.f32(), mean, rstd, N, C);
    OCC_CUDA_CHECK_LAUNCH();
  }
  if (dw || db)
    column_sums_add<2>(*this, ColumnOutputs<2>{{dw, db}},
                       LayerNormParamGrads{dout.f32(), inp.f32(), mean, rstd, C}, N, C);
}

// The fused pairs, as their separate kernels with the rounding between them.
void CudaOps::bias_dropout_add_layernorm_forward(TensorRef residual_out, TensorRef ln_out, float* mean, float* rstd,
                                                 ConstTensorRef residual, ConstTensorRef x, ConstTensorRef bias,
                                                 const Dropout& d, ConstTensorRef w, ConstTensorRef b, int64_t N,
                                                 int64_t T, int64_t C, float eps, Precision p) {
  bias_dropout_add_forward(residual_out, residual, x, bias, d, N, T, C);
  round_to_precision(residual_out.f32(), N * C, p);
  layernorm_forward(ln_out, mean, rstd, residual_out, w, b, N, C, eps);
  round_to_precision(ln_out.f32(), N * C, p);
}

void CudaOps::layernorm_dropout_backward(TensorRef dresid, TensorRef dx, float* dbias, float* dw, float* db,
                                         ConstTensorRef dout, ConstTensorRef inp, ConstTensorRef w, const float* mean,
                                         const float* rstd, const Dropout& d, int64_t N, int64_t T, int64_t C,
                                         Precision p) {
  layernorm_backward(dresid, dw, db, dout, inp, w, mean, rstd, N, C);
  round_to_precision(dresid.f32(), N * C, p);
  bias_dropout_add_backward(dx, dbias, dresid, d, N, T, C);
  round_to_precision(dx.f32(), N * C, p);
}

}  // namespace occ::kernels::cuda
