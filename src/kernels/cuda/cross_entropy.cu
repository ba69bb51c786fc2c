// Cross-entropy over vocabulary rows (kernels/cross_entropy.cpp conventions):
// the vocab-parallel steps, the loss sum, and the single-shard fused kernel.
// One block per row (V is thousands to tens of thousands); the block
// reductions and the final sum over rows run in a fixed order, so losses are
// deterministic. Losses come back to the host as one double.
#include "kernels/cuda/common.cuh"

namespace occ::kernels::cuda {

namespace {

constexpr int kSumThreads = 1024;

__global__ void row_max_kernel(float* out, const float* logits, int64_t V) {
  const float* row = logits + int64_t(blockIdx.x) * V;
  float mx = -INFINITY;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, row[v]);
  mx = block_reduce(mx, MaxOp{}, -INFINITY);
  if (threadIdx.x == 0) out[blockIdx.x] = mx;
}

__global__ void row_sum_exp_kernel(float* out, const float* logits, const float* max, int64_t V) {
  const float* row = logits + int64_t(blockIdx.x) * V;
  const float mx = max[blockIdx.x];
  float sum = 0.0f;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) sum += expf(row[v] - mx);
  sum = block_reduce(sum, SumOp{}, 0.0f);
  if (threadIdx.x == 0) out[blockIdx.x] = sum;
}

__global__ void target_logit_kernel(float* out, const float* logits, const int32_t* labels, int64_t v0, int64_t N,
                                    int64_t V) {
  for (int64_t n = global_thread(); n < N; n += grid_threads()) {
    const int64_t v = int64_t(labels[n]) - v0;
    out[n] = (v >= 0 && v < V) ? logits[n * V + v] : 0.0f;
  }
}

// logits <- scale * softmax - scale * onehot(label - v0), one block per row.
__global__ void cross_entropy_backward_kernel(float* logits, const float* max, const float* sum_exp,
                                              const int32_t* labels, int64_t v0, float scale, int64_t V) {
  const int64_t n = blockIdx.x;
  float* row = logits + n * V;
  const float mx = max[n], k = scale / sum_exp[n];
  const int64_t t = int64_t(labels[n]) - v0;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
    float g = expf(row[v] - mx) * k;
    if (v == t) g -= scale;
    row[v] = g;
  }
}

// Single-shard row: max, sum-exp, the row's loss, and (grad_scale != 0) the gradient in place.
__global__ void cross_entropy_fused_kernel(float* logits, const int32_t* labels, float grad_scale, double* row_loss,
                                           int64_t V) {
  const int64_t n = blockIdx.x;
  float* row = logits + n * V;
  const int64_t t = labels[n];
  // Read before any thread overwrites the row (the reductions below are barriers).
  // A label outside the vocabulary (a caller bug) reads nothing instead of faulting.
  const float target = (t >= 0 && t < V) ? row[t] : 0.0f;
  float mx = -INFINITY;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, row[v]);
  mx = block_reduce(mx, MaxOp{}, -INFINITY);
  float sum = 0.0f;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) sum += expf(row[v] - mx);
  sum = block_reduce(sum, SumOp{}, 0.0f);
  if (threadIdx.x == 0) row_loss[n] = double(logf(sum) + mx - target);
  if (grad_scale != 0.0f) {
    const float k = grad_scale / sum;
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
      float g = expf(row[v] - mx) * k;
      if (v == t) g -= grad_scale;
      row[v] = g;
    }
  }
}

// One block: *total += the sum of N per-row values, in a fixed order.
__global__ void sum_rows_kernel(double* total, const double* rows, int64_t N) {
  double acc = 0.0;
  for (int64_t n = threadIdx.x; n < N; n += blockDim.x) acc += rows[n];
  acc = block_reduce(acc, SumOp{}, 0.0);
  if (threadIdx.x == 0) *total += acc;
}

// One block: *total += sum_n log(sum_exp[n]) + max[n] - target[n] (each term in
// float, as on the CPU, then accumulated in double).
__global__ void loss_sum_kernel(double* total, const float* max, const float* sum_exp, const float* target,
                                int64_t N) {
  double acc = 0.0;
  for (int64_t n = threadIdx.x; n < N; n += blockDim.x) acc += double(logf(sum_exp[n]) + max[n] - target[n]);
  acc = block_reduce(acc, SumOp{}, 0.0);
  if (threadIdx.x == 0) *total += acc;
}

unsigned rows_grid(int64_t N) {
  if (N > int64_t(0x7fffffff)) throw_error("CUDA cross-entropy: " + std::to_string(N) + " rows exceed the grid");
  return unsigned(N);
}

}  // namespace

void CudaOps::row_max(float* out, ConstTensorRef logits, int64_t N, int64_t V) {
  if (N <= 0) return;
  row_max_kernel<<<rows_grid(N), kBlock, 0, stream_>>>(out, logits.f32(), V);
  OCC_CUDA_CHECK_LAUNCH();
}

void CudaOps::row_sum_exp(float* out, ConstTensorRef logits, const float* max, int64_t N, int64_t V) {
  if (N <= 0) return;
  row_sum_exp_kernel<<<rows_grid(N), kBlock, 0, stream_>>>(out, logits.f32(), max, V);
  OCC_CUDA_CHECK_LAUNCH();
}

void CudaOps::target_logit(float* out, ConstTensorRef logits, const int32_t* labels, int64_t v0, int64_t N,
                           int64_t V) {
  if (N <= 0) return;
  target_logit_kernel<<<grid_for(N), kBlock, 0, stream_>>>(out, logits.f32(), labels, v0, N, V);
  OCC_CUDA_CHECK_LAUNCH();
}

void CudaOps::cross_entropy_backward_inplace(TensorRef logits, const float* max, const float* sum_exp,
                                             const int32_t* labels, int64_t v0, float scale, int64_t N, int64_t V) {
  if (N <= 0 || V <= 0) return;
  cross_entropy_backward_kernel<<<rows_grid(N), kBlock, 0, stream_>>>(logits.f32(), max, sum_exp, labels, v0, scale,
                                                                       V);
  OCC_CUDA_CHECK_LAUNCH();
}

void CudaOps::cross_entropy_loss_sum(double* loss_sum, const float* max, const float* sum_exp, const float* target,
                                     int64_t N) {
  if (N <= 0) return;
  loss_sum_kernel<<<1, kSumThreads, 0, stream_>>>(loss_sum, max, sum_exp, target, N);
  OCC_CUDA_CHECK_LAUNCH();
}

void CudaOps::cross_entropy_fused(TensorRef logits, const int32_t* labels, float grad_scale, int64_t N, int64_t V,
                                  double* loss_sum) {
  if (N <= 0) return;
  double* row_loss = static_cast<double*>(scratch(sizeof(double) * size_t(N)));
  cross_entropy_fused_kernel<<<rows_grid(N), kBlock, 0, stream_>>>(logits.f32(), labels, grad_scale, row_loss, V);
  OCC_CUDA_CHECK_LAUNCH();
  sum_rows_kernel<<<1, kSumThreads, 0, stream_>>>(loss_sum, row_loss, N);
  OCC_CUDA_CHECK_LAUNCH();
}

}  // namespace occ::kernels::cuda
