// Cross-entropy over vocabulary rows (kernels/cross_entropy.cpp conventions):
// the vocab-parallel steps, the loss sum, and the single-shard fused kernel,
// for logits stored in fp32, bf16 or fp16 (statistics fp32, losses double).
// One block per row (V is thousands to tens of thousands); with V a multiple
// of the pack and aligned logits, threads move 16-byte packs (packs.cuh), else
// one value each. The block reductions and the final sum over rows run in a
// fixed order, so losses are deterministic; they are summed into a device
// double, read on the host once per iteration (no synchronisation here).
// A gradient written in 16 bits is rounded once from its fp32 value.
#include "kernels/cuda/packs.cuh"

namespace occ::kernels::cuda {

namespace {

constexpr int kRowThreads = 512;  // per row: a 50k-word row is ~12 packs per thread in 16 bits
constexpr int kSumThreads = 1024;

// The elements [c, c + V) of the row that thread threadIdx.x takes on each
// step: packs threadIdx.x, threadIdx.x + blockDim.x, ...
#define OCC_FOR_ROW_PACKS(c, V, Vn) \
  for (int64_t c = int64_t(threadIdx.x) * (V); c < (Vn); c += int64_t(blockDim.x) * (V))

template <int V, class S>
__global__ void row_max_kernel(float* out, const S* logits, int64_t Vn) {
  const S* row = logits + int64_t(blockIdx.x) * Vn;
  float mx = -INFINITY;
  OCC_FOR_ROW_PACKS(c, V, Vn) {
    float x[V];
    load_values<V>(row + c, x);
#pragma unroll
    for (int j = 0; j < V; ++j) mx = fmaxf(mx, x[j]);
  }
  mx = block_reduce(mx, MaxOp{}, -INFINITY);
  if (threadIdx.x == 0) out[blockIdx.x] = mx;
}

template <int V, class S>
__global__ void row_sum_exp_kernel(float* out, const S* logits, const float* max, int64_t Vn) {
  const S* row = logits + int64_t(blockIdx.x) * Vn;
  const float mx = max[blockIdx.x];
  float sum = 0.0f;
  OCC_FOR_ROW_PACKS(c, V, Vn) {
    float x[V];
    load_values<V>(row + c, x);
#pragma unroll
    for (int j = 0; j < V; ++j) sum += expf(x[j] - mx);
  }
  sum = block_reduce(sum, SumOp{}, 0.0f);
  if (threadIdx.x == 0) out[blockIdx.x] = sum;
}

template <class S>
__global__ void target_logit_kernel(float* out, const S* logits, const int32_t* labels, int64_t v0, int64_t N,
                                    int64_t Vn) {
  for (int64_t n = global_thread(); n < N; n += grid_threads()) {
    const int64_t v = int64_t(labels[n]) - v0;
    out[n] = (v >= 0 && v < Vn) ? widen(logits[n * Vn + v]) : 0.0f;
  }
}

// row <- scale * exp(row - max) / sum_exp, minus scale at the label (t: the
// label's column in this shard, outside [0, Vn) when elsewhere); rounded once to S.
template <int V, class S>
__device__ __forceinline__ void write_softmax_gradient(S* row, int64_t Vn, float mx, float k, int64_t t, float scale) {
  OCC_FOR_ROW_PACKS(c, V, Vn) {
    float g[V];
    load_values<V>(row + c, g);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      g[j] = expf(g[j] - mx) * k;
      if (c + j == t) g[j] -= scale;
    }
    store_values<V>(row + c, g);
  }
}

// logits <- scale * softmax - scale * onehot(label - v0), one block per row.
template <int V, class S>
__global__ void cross_entropy_backward_kernel(S* logits, const float* max, const float* sum_exp,
                                              const int32_t* labels, int64_t v0, float scale, int64_t Vn) {
  const int64_t n = blockIdx.x;
  write_softmax_gradient<V>(logits + n * Vn, Vn, max[n], scale / sum_exp[n], int64_t(labels[n]) - v0, scale);
}

// Running (max, sum of exp(x - max)) of a set of values, and their
// combination: commutative bit for bit (each term is the same product, and
// the two sums are added in either order to the same float), so a butterfly
// leaves the same pair on every lane.
struct MaxSum {
  float m, s;
};
__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.0f};  // both empty (exp(-inf - -inf) would be NaN)
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

// The row's (max, sum) over the block, in a fixed order; every thread gets it.
__device__ MaxSum block_max_sum(MaxSum v) {
  __shared__ MaxSum partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    v = combine(v, {__shfl_xor_sync(0xffffffffu, v.m, offset), __shfl_xor_sync(0xffffffffu, v.s, offset)});
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    MaxSum w = lane < warps ? partial[lane] : MaxSum{-INFINITY, 0.0f};
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
      w = combine(w, {__shfl_xor_sync(0xffffffffu, w.m, offset), __shfl_xor_sync(0xffffffffu, w.s, offset)});
    if (lane == 0) partial[0] = w;
  }
  __syncthreads();
  return partial[0];
}

// Single-shard row: max and sum-exp in one read (online, as flash attention:
// a thread rescales its sum when its max grows, once per pack), the row's
// loss, and (grad_scale != 0) the gradient in place.
template <int V, class S>
__global__ void cross_entropy_fused_kernel(S* logits, const int32_t* labels, float grad_scale, double* row_loss,
                                           int64_t Vn) {
  const int64_t n = blockIdx.x;
  S* row = logits + n * Vn;
  const int64_t t = labels[n];
  // Read before any thread overwrites the row (block_max_sum is a barrier). A
  // label outside the vocabulary (a caller bug) reads nothing instead of faulting.
  const float target = (t >= 0 && t < Vn) ? widen(row[t]) : 0.0f;
  MaxSum ms{-INFINITY, 0.0f};
  OCC_FOR_ROW_PACKS(c, V, Vn) {
    float x[V];
    load_values<V>(row + c, x);
    float pm = x[0];
#pragma unroll
    for (int j = 1; j < V; ++j) pm = fmaxf(pm, x[j]);
    if (pm > ms.m) {  // never true for -inf, so exp(-inf - -inf) never occurs
      ms.s *= expf(ms.m - pm);
      ms.m = pm;
    }
    if (ms.m == -INFINITY) continue;  // only -inf so far: adds nothing
#pragma unroll
    for (int j = 0; j < V; ++j) ms.s += expf(x[j] - ms.m);
  }
  ms = block_max_sum(ms);
  if (threadIdx.x == 0) row_loss[n] = double(logf(ms.s) + ms.m - target);
  if (grad_scale != 0.0f) write_softmax_gradient<V>(row, Vn, ms.m, grad_scale / ms.s, t, grad_scale);
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

// Calls f(S{}, std::integral_constant<int, P>{}) for the logits' storage S and
// P = the pack when rows of Vn values allow it, else 1.
template <class F>
void with_logits(ConstTensorRef logits, int64_t Vn, F&& f) {
  with_storage(logits.format(), [&](auto tag) {
    using S = decltype(tag);
    if (Vn % kPack<S> == 0 && aligned16(logits.data()))
      f(tag, std::integral_constant<int, kPack<S>>{});
    else
      f(tag, std::integral_constant<int, 1>{});
  });
}

#undef OCC_FOR_ROW_PACKS

}  // namespace

void CudaOps::row_max(float* out, ConstTensorRef logits, int64_t N, int64_t V) {
  if (N <= 0) return;
  with_logits(logits, V, [&](auto tag, auto pack) {
    using S = decltype(tag);
    row_max_kernel<decltype(pack)::value><<<rows_grid(N), kRowThreads, 0, stream_>>>(out, typed<S>(logits), V);
  });
  OCC_CUDA_CHECK_LAUNCH();
}

void CudaOps::row_sum_exp(float* out, ConstTensorRef logits, const float* max, int64_t N, int64_t V) {
  if (N <= 0) return;
  with_logits(logits, V, [&](auto tag, auto pack) {
    using S = decltype(tag);
    row_sum_exp_kernel<decltype(pack)::value><<<rows_grid(N), kRowThreads, 0, stream_>>>(out, typed<S>(logits), max,
                                                                                        V);
  });
  OCC_CUDA_CHECK_LAUNCH();
}

void CudaOps::target_logit(float* out, ConstTensorRef logits, const int32_t* labels, int64_t v0, int64_t N,
                           int64_t V) {
  if (N <= 0) return;
  with_storage(logits.format(), [&](auto tag) {
    using S = decltype(tag);
    target_logit_kernel<<<grid_for(N), kBlock, 0, stream_>>>(out, typed<S>(logits), labels, v0, N, V);
  });
  OCC_CUDA_CHECK_LAUNCH();
}

void CudaOps::cross_entropy_backward_inplace(TensorRef logits, const float* max, const float* sum_exp,
                                             const int32_t* labels, int64_t v0, float scale, int64_t N, int64_t V) {
  if (N <= 0 || V <= 0) return;
  with_logits(logits, V, [&](auto tag, auto pack) {
    using S = decltype(tag);
    cross_entropy_backward_kernel<decltype(pack)::value><<<rows_grid(N), kRowThreads, 0, stream_>>>(
        typed<S>(logits), max, sum_exp, labels, v0, scale, V);
  });
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
  with_logits(logits, V, [&](auto tag, auto pack) {
    using S = decltype(tag);
    cross_entropy_fused_kernel<decltype(pack)::value><<<rows_grid(N), kRowThreads, 0, stream_>>>(
        typed<S>(logits), labels, grad_scale, row_loss, V);
  });
  OCC_CUDA_CHECK_LAUNCH();
  sum_rows_kernel<<<1, kSumThreads, 0, stream_>>>(loss_sum, row_loss, N);
  OCC_CUDA_CHECK_LAUNCH();
}

}  // namespace occ::kernels::cuda
