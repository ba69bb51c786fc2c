// Optimizer kernels: fused AdamW (the CPU backend's formula, element by
// element), sum of squares for the gradient norm (double accumulation, in an
// order fixed by the sizes alone so that the norm, and hence clipping, is
// deterministic) and scaling. fp32 throughout (master weights, gradients and
// moments always are); AdamW and scale move float4 packs where the tensors are
// 16-byte aligned, with the same arithmetic per element, so the bits are the
// same on either path.
#include <algorithm>

#include "kernels/cuda/packs.cuh"

namespace occ::kernels::cuda {

namespace {

// Pass-1 blocks of sum_squares: a constant, so the order of additions is the
// same on every GPU.
constexpr int kSquareBlocks = 512;

struct AdamW {
  float *params, *m, *v;
  const float* grads;
  const uint8_t* decay;
  AdamWStep s;
  template <int V>
  __device__ __forceinline__ void apply(int64_t i) const {
    float p[V], g[V], mi[V], vi[V];
    load_values<V>(params + i, p);
    load_values<V>(grads + i, g);
    load_values<V>(m + i, mi);
    load_values<V>(v + i, vi);
    uint8_t dk[V];
    if constexpr (V == 4) {
      const uchar4 d4 = *reinterpret_cast<const uchar4*>(decay + i);  // 4-byte aligned (the host checks)
      dk[0] = d4.x, dk[1] = d4.y, dk[2] = d4.z, dk[3] = d4.w;
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) dk[j] = decay[i + j];
    }
#pragma unroll
    for (int j = 0; j < V; ++j) {
      mi[j] = s.beta1 * mi[j] + (1.0f - s.beta1) * g[j];
      vi[j] = s.beta2 * vi[j] + (1.0f - s.beta2) * g[j] * g[j];
      const float update = (mi[j] * s.bias_correction1) / (sqrtf(vi[j] * s.bias_correction2) + s.eps);
      // Decoupled weight decay (AdamW), as torch.optim.AdamW: p *= 1 - lr * wd.
      const float pd = dk[j] ? p[j] * (1.0f - s.lr * s.weight_decay) : p[j];
      p[j] = pd - s.lr * update;
    }
    store_values<V>(m + i, mi);
    store_values<V>(v + i, vi);
    store_values<V>(params + i, p);
  }
};

struct Scale {
  float* x;
  float factor;
  template <int V>
  __device__ __forceinline__ void apply(int64_t i) const {
    float v[V];
    load_values<V>(x + i, v);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] *= factor;
    store_values<V>(x + i, v);
  }
};

__global__ void sum_squares_partial_kernel(double* partial, const float* x, int64_t n) {
  double acc = 0.0;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) acc += double(x[i]) * double(x[i]);
  acc = block_reduce(acc, SumOp{}, 0.0);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void sum_partials_kernel(double* total, const double* partial, int64_t count) {
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
  acc = block_reduce(acc, SumOp{}, 0.0);
  if (threadIdx.x == 0) *total = acc;
}

// ---- the sum of squares of many spans, one pass -------------------------------------------
// Each span is cut into chunks of kSquareChunk elements (the last one shorter);
// block-chunk j's sum of squares goes to partial[j], chunks numbered span by
// span in the caller's order, and one block adds the partials in a fixed order.
// Within a chunk, thread t adds the elements 4t .. 4t + 3, then 4 (t + blockDim)
// .., each group of four in order: the order depends on the spans' sizes only
// (a chunk's address decides merely whether the four come in one float4 load).
constexpr int64_t kSquareChunk = 16384;
// The span list travels as the kernel's argument (no copy, no host buffer to
// keep alive): kSpanBatch spans per launch keep it well under the 4 KiB limit.
constexpr int kSpanBatch = 96;
struct SpanBatch {
  int count = 0;
  int64_t first_chunk = 0;               // global number of the batch's first chunk
  int64_t offset[kSpanBatch] = {};       // the spans, in elements from base
  int64_t numel[kSpanBatch] = {};
  int64_t chunks_through[kSpanBatch] = {};  // chunks of spans 0 .. i of the batch
};
static_assert(sizeof(SpanBatch) < 4000, "kernel arguments are limited to 4 KiB");

__global__ void span_squares_kernel(double* partial, const float* base, SpanBatch batch) {
  const int64_t chunks = batch.chunks_through[batch.count - 1];
  for (int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {  // uniform over the block
    int lo = 0, hi = batch.count - 1;  // the first span whose chunks reach past `chunk`
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (batch.chunks_through[mid] > chunk)
        hi = mid;
      else
        lo = mid + 1;
    }
    const int64_t k = chunk - (lo > 0 ? batch.chunks_through[lo - 1] : 0);
    const int64_t begin = k * kSquareChunk, len = min(kSquareChunk, batch.numel[lo] - begin);
    const float* x = base + batch.offset[lo] + begin;
    const bool vector = aligned16(x);
    double acc = 0.0;
    for (int64_t e = 4 * int64_t(threadIdx.x); e < len; e += 4 * int64_t(blockDim.x)) {
      float v[4];
      if (vector && e + 4 <= len) {
        load_values<4>(x + e, v);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = e + j < len ? x[e + j] : 0.0f;
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) acc += double(v[j]) * double(v[j]);
    }
    acc = block_reduce(acc, SumOp{}, 0.0);
    if (threadIdx.x == 0) partial[batch.first_chunk + chunk] = acc;
  }
}

}  // namespace

void CudaOps::adamw_update(float* params, const float* grads, float* m, float* v, const uint8_t* decay, int64_t n,
                           const AdamWStep& step) {
  if (n <= 0) return;
  const bool vector = aligned16(params) && aligned16(grads) && aligned16(m) && aligned16(v) &&
                      (reinterpret_cast<uintptr_t>(decay) & 3u) == 0;
  launch_packed_map<4>(stream_, AdamW{params, m, v, grads, decay, step}, n, vector);
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
  int64_t chunks = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (spans[i].numel < 0) throw_error("sum_squares_spans: a span of negative length");
    chunks += (spans[i].numel + kSquareChunk - 1) / kSquareChunk;
  }
  if (chunks == 0) return 0.0;
  // scratch: [total | one partial per chunk]
  double* total = static_cast<double*>(scratch(sizeof(double) * size_t(chunks + 1)));
  double* partial = total + 1;
  int64_t done = 0;
  for (int64_t first = 0; first < count; first += kSpanBatch) {
    SpanBatch batch;
    batch.first_chunk = done;
    int64_t batch_chunks = 0;
    for (int64_t i = first; i < count && batch.count < kSpanBatch; ++i, ++batch.count) {
      batch.offset[batch.count] = spans[i].offset;
      batch.numel[batch.count] = spans[i].numel;
      batch_chunks += (spans[i].numel + kSquareChunk - 1) / kSquareChunk;
      batch.chunks_through[batch.count] = batch_chunks;
    }
    if (batch_chunks > 0) {
      span_squares_kernel<<<unsigned(std::min<int64_t>(batch_chunks, int64_t(1) << 16)), kBlock, 0, stream_>>>(
          partial, base, batch);
      OCC_CUDA_CHECK_LAUNCH();
    }
    done += batch_chunks;
  }
  sum_partials_kernel<<<1, 1024, 0, stream_>>>(total, partial, chunks);
  OCC_CUDA_CHECK_LAUNCH();
  return read_double(total);  // the one wait
}

void CudaOps::scale(float* x, float factor, int64_t n) {
  if (n <= 0) return;
  launch_packed_map<4>(stream_, Scale{x, factor}, n, aligned16(x));
}

}  // namespace occ::kernels::cuda
