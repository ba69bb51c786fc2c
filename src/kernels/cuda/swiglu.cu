// SwiGLU (Llama's MLP activation) for fp32, bf16 and fp16 storage, and the
// MLP's first linear layer with it: out = silu(gate) * up over rows
// [gate (F) | up (F)], and its gradient. The formulas are
// kernels/elementwise.cpp's term for term (silu(g) = g / (1 + e^-g) with expf
// where the CPU has std::exp), so fp32 results agree to an ulp or two.
//
// There is no cuBLASLt epilogue for a gated unit: forward is the GEMM (bias in
// its epilogue) storing [gate | up] once, then one pass producing out; backward
// is the GEMM g = dout w into fp32, then one pass turning g and the stored
// [gate | up] into their gradient (rounded once), with the bias gradient's
// column sums from the same fp32 values: the activation gradient is never
// stored rounded and read back (the pass that a separate swiglu_backward after
// linear_backward would add).
#include "kernels/cuda/lt_matmul.h"
#include "kernels/cuda/packs.cuh"
#include "kernels/cuda/reduce.cuh"

namespace occ::kernels::cuda {

namespace {

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// out[n, j] = silu(inp[n, j]) * inp[n, F + j]; V values of one row per step (F % V == 0 when V > 1).
template <class S, int V>
__global__ void swiglu_forward_kernel(S* out, const S* inp, int64_t N, int64_t F) {
  const int64_t row_packs = F / V, total = N * row_packs;
  for (int64_t q = global_thread(); q < total; q += grid_threads()) {
    const int64_t n = q / row_packs, j = (q % row_packs) * V;
    float g[V], u[V], y[V];
    load_values<V>(inp + n * 2 * F + j, g);
    load_values<V>(inp + n * 2 * F + F + j, u);
#pragma unroll
    for (int e = 0; e < V; ++e) y[e] = g[e] * sigmoid(g[e]) * u[e];
    store_values<V>(out + n * F + j, y);
  }
}

// The gradient of [gate | up] from dy (G: S, or fp32 for g = dout w):
// dgate = dy up silu'(gate), dup = dy silu(gate).
template <class S, class G, int V>
__global__ void swiglu_backward_kernel(S* dinp, const S* inp, const G* dout, int64_t N, int64_t F) {
  const int64_t row_packs = F / V, total = N * row_packs;
  for (int64_t q = global_thread(); q < total; q += grid_threads()) {
    const int64_t n = q / row_packs, j = (q % row_packs) * V;
    float g[V], u[V], dy[V], dg[V], du[V];
    load_values<V>(inp + n * 2 * F + j, g);
    load_values<V>(inp + n * 2 * F + F + j, u);
    load_values<V>(dout + n * F + j, dy);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const float s = sigmoid(g[e]);
      dg[e] = dy[e] * u[e] * (s * (1.0f + g[e] * (1.0f - s)));
      du[e] = dy[e] * (g[e] * s);
    }
    store_values<V>(dinp + n * 2 * F + j, dg);
    store_values<V>(dinp + n * 2 * F + F + j, du);
  }
}

// Column c of the unrounded [N, 2F] gradient (the bias gradient's column sums).
template <class S>
struct SwigluGradRows {
  const float* dy;  // [N, F]
  const S* inp;     // [N, 2F]
  int64_t F;
  __device__ __forceinline__ void operator()(int64_t n, int64_t c, float (&v)[1]) const {
    const int64_t j = c < F ? c : c - F;
    const float g = widen(inp[n * 2 * F + j]), u = widen(inp[n * 2 * F + F + j]), d = dy[n * F + j];
    const float s = sigmoid(g);
    v[0] = c < F ? d * u * (s * (1.0f + g * (1.0f - s))) : d * (g * s);
  }
};

// V of storage S where the rows allow packs (F a multiple of it, tensors 16-byte aligned), else 1.
template <class S, class F>
void launch_swiglu(int64_t F_, std::initializer_list<const void*> tensors, F&& launch) {
  bool vector = F_ % kPack<S> == 0;
  for (const void* t : tensors) vector = vector && aligned16(t);
  if (vector)
    launch(std::integral_constant<int, kPack<S>>{});
  else
    launch(std::integral_constant<int, 1>{});
}

}  // namespace

void CudaOps::swiglu_forward(TensorRef out, ConstTensorRef inp, int64_t N, int64_t F) {
  if (N <= 0 || F <= 0) return;
  require_format(inp.format(), {out}, "swiglu_forward");
  with_storage(inp.format(), [&](auto tag) {
    using S = decltype(tag);
    launch_swiglu<S>(F, {out.data(), inp.data()}, [&](auto v) {
      constexpr int V = decltype(v)::value;
      swiglu_forward_kernel<S, V><<<grid_for(N * (F / V)), kBlock, 0, stream_>>>(typed<S>(out), typed<S>(inp), N, F);
    });
    OCC_CUDA_CHECK_LAUNCH();
  });
}

void CudaOps::swiglu_backward(TensorRef dinp, ConstTensorRef inp, ConstTensorRef dout, int64_t N, int64_t F) {
  if (N <= 0 || F <= 0) return;
  require_format(inp.format(), {dinp, dout}, "swiglu_backward");
  with_storage(inp.format(), [&](auto tag) {
    using S = decltype(tag);
    launch_swiglu<S>(F, {dinp.data(), inp.data(), dout.data()}, [&](auto v) {
      constexpr int V = decltype(v)::value;
      swiglu_backward_kernel<S, S, V>
          <<<grid_for(N * (F / V)), kBlock, 0, stream_>>>(typed<S>(dinp), typed<S>(inp), typed<S>(dout), N, F);
    });
    OCC_CUDA_CHECK_LAUNCH();
  });
}

void CudaOps::linear_swiglu_forward(TensorRef pre, TensorRef out, ConstTensorRef inp, ConstTensorRef w,
                                    ConstTensorRef bias, int64_t N, int64_t C, int64_t F, Precision p) {
  if (N <= 0 || F <= 0) return;
  // [gate | up] stored once (16 bits: rounded by the GEMM's store; fp32 storage: rounded here).
  linear_forward(pre, inp, w, bias, N, C, 2 * F, p);
  if (pre.is_fp32()) round_to_precision(pre.f32(), N * 2 * F, p);
  swiglu_forward(out, pre, N, F);  // from [gate | up] as stored, as the CPU
  if (out.is_fp32()) round_to_precision(out.f32(), N * F, p);
}

void CudaOps::linear_backward_swiglu(TensorRef dpre, float* dpre_bias, float* dw, ConstTensorRef dout,
                                     ConstTensorRef act, ConstTensorRef pre, ConstTensorRef w, int64_t N, int64_t F,
                                     int64_t OC, Precision p) {
  if (N <= 0 || F <= 0) return;
  require_format(dout.format(), {dpre, act, pre, w}, "linear_backward_swiglu");
  // dw += dout^T act.
  if (dw) linear_backward(nullptr, dw, nullptr, dout, act, w, N, F, OC, false, p);
  // g = dout w in fp32, in the operand buffer: 16-bit tensors through cuBLASLt
  // with an fp32 output (no epilogue: nothing else takes the operand buffer);
  // fp32 storage multiplies in fp32 (its 16-bit copies would take the operand
  // buffer too, and values of the format make every product exact in fp32).
  float* g = static_cast<float*>(operand_buffer(sizeof(float) * size_t(N * F)));
  if (!dout.is_fp32()) {
    LinearBackwardInputArgs a;
    a.dinp = g;
    a.dinp_format = Precision::Fp32;
    a.dout = dout.data();
    a.w = w.data();
    a.N = N, a.C = F, a.OC = OC;
    a.operands = dout.format();
    lt().linear_backward_input(a);
  } else {
    linear_backward(TensorRef(g, Precision::Fp32), nullptr, nullptr, dout, act, w, N, F, OC, false,
                    Precision::Fp32);
  }
  with_storage(pre.format(), [&](auto tag) {
    using S = decltype(tag);
    if (dpre_bias)  // of the unrounded gradient, as the CPU (the column sums use scratch(), not g's buffer)
      column_sums_add<1>(*this, ColumnOutputs<1>{{dpre_bias}}, SwigluGradRows<S>{g, typed<S>(pre), F}, N, 2 * F);
    launch_swiglu<S>(F, {dpre.data(), pre.data(), g}, [&](auto v) {
      constexpr int V = decltype(v)::value;
      swiglu_backward_kernel<S, float, V>
          <<<grid_for(N * (F / V)), kBlock, 0, stream_>>>(typed<S>(dpre), typed<S>(pre), g, N, F);
    });
    OCC_CUDA_CHECK_LAUNCH();
  });
  if (dpre.is_fp32()) round_to_precision(dpre.f32(), N * 2 * F, p);
}

}  // namespace occ::kernels::cuda
