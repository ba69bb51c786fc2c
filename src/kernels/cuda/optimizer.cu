// Optimizer kernels: fused AdamW (the CPU backend's formula, element by
// element), sum of squares for the gradient norm (double accumulation, fixed
// two-pass order so the norm, and hence clipping, is deterministic) and scaling.
#include "kernels/cuda/common.cuh"

namespace occ::kernels::cuda {

namespace {

// Pass-1 blocks of sum_squares: a constant, so the order of additions is the
// same on every GPU.
constexpr int kSquareBlocks = 512;

__global__ void adamw_kernel(float* params, const float* grads, float* m, float* v, const uint8_t* decay, int64_t n,
                             AdamWStep s) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float g = grads[i];
    const float mi = s.beta1 * m[i] + (1.0f - s.beta1) * g;
    const float vi = s.beta2 * v[i] + (1.0f - s.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float update = (mi * s.bias_correction1) / (sqrtf(vi * s.bias_correction2) + s.eps);
    // Decoupled weight decay (AdamW), as torch.optim.AdamW: p *= 1 - lr * wd.
    const float p = decay[i] ? params[i] * (1.0f - s.lr * s.weight_decay) : params[i];
    params[i] = p - s.lr * update;
  }
}

__global__ void sum_squares_partial_kernel(double* partial, const float* x, int64_t n) {
  double acc = 0.0;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) acc += double(x[i]) * double(x[i]);
  acc = block_reduce(acc, SumOp{}, 0.0);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void sum_partials_kernel(double* total, const double* partial, int count) {
  double acc = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
  acc = block_reduce(acc, SumOp{}, 0.0);
  if (threadIdx.x == 0) *total = acc;
}

__global__ void scale_kernel(float* x, float factor, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) x[i] *= factor;
}

}  // namespace

void CudaOps::adamw_update(float* params, const float* grads, float* m, float* v, const uint8_t* decay, int64_t n,
                           const AdamWStep& step) {
  if (n <= 0) return;
  adamw_kernel<<<grid_for(n), kBlock, 0, stream_>>>(params, grads, m, v, decay, n, step);
  OCC_CUDA_CHECK_LAUNCH();
}

double CudaOps::sum_squares(const float* x, int64_t n) {
  if (n <= 0) return 0.0;
  // scratch: [total | partial sums of the pass-1 blocks]
  double* total = static_cast<double*>(scratch(sizeof(double) * (kSquareBlocks + 1)));
  double* partial = total + 1;
  sum_squares_partial_kernel<<<kSquareBlocks, kBlock, 0, stream_>>>(partial, x, n);
  OCC_CUDA_CHECK_LAUNCH();
  sum_partials_kernel<<<1, kBlock, 0, stream_>>>(total, partial, kSquareBlocks);
  OCC_CUDA_CHECK_LAUNCH();
  return read_double(total);
}

double CudaOps::sum_squares_spans(const float* base, const Span* spans, int64_t count) {
  // Placeholder until the one-pass kernel: the spans' sums in order.
  double s = 0.0;
  for (int64_t i = 0; i < count; ++i) s += sum_squares(base + spans[i].offset, spans[i].numel);
  return s;
}

void CudaOps::scale(float* x, float factor, int64_t n) {
  if (n <= 0) return;
  scale_kernel<<<grid_for(n), kBlock, 0, stream_>>>(x, factor, n);
  OCC_CUDA_CHECK_LAUNCH();
}

}  // namespace occ::kernels::cuda
