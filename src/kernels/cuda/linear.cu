// Linear layers through cuBLAS. Activations are row-major [N, C], weights
// [OC, C]; cuBLAS is column-major, and a row-major X is the column-major X^T,
// so each product X = A B below is issued as X^T = B^T A^T.
//
// Three cases:
//  - 16-bit tensors (a --bf16 / --fp16 step on the GPU): cuBLASLt (lt_matmul.h)
//    multiplies them where they lie on the tensor cores with fp32 accumulation,
//    with the bias, its gradient and the MLP's GeLU in its epilogues, each
//    result rounded once into its 16-bit tensor;
//  - fp32 tensors holding bf16 / fp16 values (`operands`, ops.h): copied to that
//    format, exactly, and multiplied on the tensor cores with fp32 accumulation;
//  - fp32: multiplied in fp32 (no TF32: the reference numerics).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/lt_matmul.h"
#include "kernels/cuda/reduce.cuh"

namespace occ::kernels::cuda {

namespace {

// out[n, o] = bias[o]: the GEMM then adds onto it (beta = 1), as on the CPU.
__global__ void broadcast_rows_kernel(float* out, const float* bias, int64_t N, int64_t OC) {
  for (int64_t i = global_thread(); i < N * OC; i += grid_threads()) out[i] = bias[i % OC];
}

// Exact for values of the format (round-to-nearest-even otherwise, as core/precision.h).
__global__ void to_bf16_kernel(__nv_bfloat16* out, const float* in, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) out[i] = __float2bfloat16_rn(in[i]);
}
__global__ void to_fp16_kernel(__half* out, const float* in, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) out[i] = __float2half_rn(in[i]);
}

// 16-bit copies of a linear layer's operands, carved from one operand buffer.
class SixteenBitOperands {
 public:
  // `counts`: the element count of each operand to copy (0: not needed).
  SixteenBitOperands(CudaOps& ops, Precision format, std::initializer_list<int64_t> counts)
      : ops_(ops), format_(format) {
    size_t bytes = 0;
    for (int64_t c : counts) bytes += padded(c);
    base_ = static_cast<char*>(ops.operand_buffer(bytes));
  }
  // Copies x[n] into the next slot and returns it.
  const void* copy(const float* x, int64_t n) {
    void* slot = base_ + used_;
    used_ += padded(n);
    if (format_ == Precision::Bf16)
      to_bf16_kernel<<<grid_for(n), kBlock, 0, ops_.stream()>>>(static_cast<__nv_bfloat16*>(slot), x, n);
    else
      to_fp16_kernel<<<grid_for(n), kBlock, 0, ops_.stream()>>>(static_cast<__half*>(slot), x, n);
    OCC_CUDA_CHECK_LAUNCH();
    return slot;
  }

 private:
  // 2 bytes per value, each operand 256-byte aligned (cuBLAS's fast kernels want 16).
  static size_t padded(int64_t n) { return (size_t(n) * 2 + 255) & ~size_t(255); }
  CudaOps& ops_;
  Precision format_;
  char* base_ = nullptr;
  size_t used_ = 0;
};

bool sixteen_bit(Precision p) { return p == Precision::Bf16 || p == Precision::Fp16; }

}  // namespace

namespace {

// g = g * gelu'(pre), in place (g unrounded; the caller rounds).
__global__ void gelu_grad_inplace_kernel(float* g, const float* pre, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) g[i] *= gelu_slope(pre[i]);
}

// Column sums over 16-bit rows.
template <class S>
struct StoredRows {
  const S* x;
  int64_t C;
  __device__ __forceinline__ void operator()(int64_t n, int64_t c, float (&v)[1]) const { v[0] = widen(x[n * C + c]); }
};

}  // namespace

LtMatmul& CudaOps::lt() {
  if (!lt_) lt_ = std::make_unique<LtMatmul>(*this);
  return *lt_;
}

void CudaOps::linear_forward(TensorRef out, ConstTensorRef inp, ConstTensorRef w, ConstTensorRef bias, int64_t N,
                             int64_t C, int64_t OC, Precision operands) {
  if (N <= 0 || OC <= 0) return;
  if (!inp.is_fp32()) {
    // 16-bit tensors: cuBLASLt reads them where they lie, adds the bias in its
    // epilogue and rounds the result once into out.
    require_format(inp.format(), {out, w}, "linear_forward");
    LinearForwardArgs a;
    a.out = out.data();
    a.out_format = out.format();
    a.inp = inp.data();
    a.w = w.data();
    a.bias = bias.data();
    a.bias_format = bias ? bias.format() : Precision::Fp32;
    a.N = N, a.C = C, a.OC = OC;
    a.operands = inp.format();
    lt().linear_forward(a);
    return;
  }
  float* out32 = out.f32();
  const float* inp32 = inp.f32();
  const float* w32 = w.f32();
  float beta = 0.0f;
  if (bias) {
    broadcast_rows_kernel<<<grid_for(N * OC), kBlock, 0, stream_>>>(out32, bias.f32(), N, OC);
    OCC_CUDA_CHECK_LAUNCH();
    beta = 1.0f;
  }
  // out^T [OC, N] = w [OC, C] . inp^T [C, N]: op(A) = T on w's column-major view (C x OC).
  if (sixteen_bit(operands) && C > 0) {
    SixteenBitOperands lp(*this, operands, {OC * C, N * C});
    const void* w16 = lp.copy(w32, OC * C);
    const void* inp16 = lp.copy(inp32, N * C);
    gemm_16bit(operands, true, false, OC, N, C, 1.0f, w16, C, inp16, C, beta, out32, OC);
  } else {
    gemm(true, false, OC, N, C, 1.0f, w32, C, inp32, C, beta, out32, OC);
  }
}

void CudaOps::linear_backward(TensorRef dinp, float* dw, float* dbias, ConstTensorRef dout, ConstTensorRef inp,
                              ConstTensorRef w, int64_t N, int64_t C, int64_t OC, bool accumulate_dinp,
                              Precision operands) {
  if (N <= 0) return;
  if (!dout.is_fp32()) {
    require_format(dout.format(), {dinp, inp, w}, "linear_backward");
    if (dinp && C > 0) {
      LinearBackwardInputArgs a;
      a.dinp = dinp.data();
      a.dinp_format = dinp.format();
      a.dout = dout.data();
      a.w = w.data();
      a.accumulate = accumulate_dinp;
      a.N = N, a.C = C, a.OC = OC;
      a.operands = dout.format();
      lt().linear_backward_input(a);
    }
    if (dw) {
      // dbias comes with the weight gradient (cuBLASLt's BGRADB epilogue).
      LinearBackwardWeightArgs a;
      a.dw = dw;
      a.dbias = dbias;
      a.dout = dout.data();
      a.inp = inp.data();
      a.N = N, a.C = C, a.OC = OC;
      a.operands = dout.format();
      lt().linear_backward_weight(a);
    } else if (dbias) {
      with_storage(dout.format(), [&](auto s) {
        using S = decltype(s);
        column_sums_add<1>(*this, ColumnOutputs<1>{{dbias}}, StoredRows<S>{typed<S>(dout), OC}, N, OC);
      });
    }
    return;
  }
  float* dinp32 = dinp.f32();
  const float* dout32 = dout.f32();
  const float* inp32 = inp.f32();
  const float* w32 = w.f32();
  // dbias [OC] += column sums of dout (fp32, from the fp32 copy)
  if (dbias) column_sums_add<1>(*this, ColumnOutputs<1>{{dbias}}, DenseRows{dout32, OC}, N, OC);
  if (sixteen_bit(operands) && C > 0 && OC > 0) {
    SixteenBitOperands lp(*this, operands, {N * OC, dinp32 ? OC * C : 0, dw ? N * C : 0});
    const void* dout16 = lp.copy(dout32, N * OC);
    if (dinp32) gemm_16bit(operands, false, false, C, N, OC, 1.0f, lp.copy(w32, OC * C), C, dout16, OC,
                           accumulate_dinp ? 1.0f : 0.0f, dinp32, C);
    if (dw) gemm_16bit(operands, false, true, C, OC, N, 1.0f, lp.copy(inp32, N * C), C, dout16, OC, 1.0f, dw, C);
    return;
  }
  // dinp [N, C] = dout [N, OC] . w [OC, C]  ->  dinp^T = w^T . dout^T
  if (dinp32) gemm(false, false, C, N, OC, 1.0f, w32, C, dout32, OC, accumulate_dinp ? 1.0f : 0.0f, dinp32, C);
  // dw [OC, C] += dout^T . inp  ->  dw^T [C, OC] += inp^T . dout
  if (dw) gemm(false, true, C, OC, N, 1.0f, inp32, C, dout32, OC, 1.0f, dw, C);
}

void CudaOps::linear_gelu_forward(TensorRef pre, TensorRef out, ConstTensorRef inp, ConstTensorRef w,
                                  ConstTensorRef bias, int64_t N, int64_t C, int64_t OC, Precision p) {
  if (N <= 0 || OC <= 0) return;
  if (!inp.is_fp32()) {
    // cuBLASLt's GELU_AUX_BIAS epilogue: pre and gelu(pre) from the same fp32 sums, each rounded once.
    require_format(inp.format(), {pre, out, w}, "linear_gelu_forward");
    LinearForwardArgs a;
    a.out = out.data();
    a.out_format = out.format();
    a.pre_gelu = pre.data();
    a.inp = inp.data();
    a.w = w.data();
    a.bias = bias.data();
    a.bias_format = bias ? bias.format() : Precision::Fp32;
    a.N = N, a.C = C, a.OC = OC;
    a.operands = inp.format();
    lt().linear_forward(a);
    return;
  }
  // fp32 storage (the CPU's order, kernels/cpu_ops.cpp): pre = inp w^T + bias, out =
  // gelu(pre), then both rounded to p. Into pre itself: a scratch buffer here would be
  // the operand buffer, which linear_forward's 16-bit operand copies take too.
  linear_forward(pre, inp, w, bias, N, C, OC, p);
  gelu_forward(out, pre, N * OC);  // GeLU of the unrounded sum
  round_to_precision(pre.f32(), N * OC, p);
  round_to_precision(out.f32(), N * OC, p);
}

void CudaOps::linear_backward_gelu(TensorRef dpre, float* dpre_bias, float* dw, ConstTensorRef dout,
                                   ConstTensorRef gelu_out, ConstTensorRef pre, ConstTensorRef w, int64_t N, int64_t C,
                                   int64_t OC, Precision p) {
  if (N <= 0) return;
  if (!dout.is_fp32()) {
    require_format(dout.format(), {dpre, gelu_out, pre, w}, "linear_backward_gelu");
    if (dw) {
      LinearBackwardWeightArgs a;
      a.dw = dw;
      a.dout = dout.data();
      a.inp = gelu_out.data();
      a.N = N, a.C = C, a.OC = OC;
      a.operands = dout.format();
      lt().linear_backward_weight(a);
    }
    // cuBLASLt's DGELU_BGRAD epilogue: (dout w) * gelu'(pre) rounded once, its column sums in fp32.
    LinearBackwardInputArgs a;
    a.dinp = dpre.data();
    a.dinp_format = dpre.format();
    a.dout = dout.data();
    a.w = w.data();
    a.pre_gelu = pre.data();
    a.dbias_of_dinp = dpre_bias;
    a.N = N, a.C = C, a.OC = OC;
    a.operands = dout.format();
    lt().linear_backward_input(a);
    return;
  }
  // fp32 storage (the CPU's order): dw += dout^T gelu_out; g = dout w into dpre itself
  // (not a scratch buffer: that would be the operand buffer of linear_backward's 16-bit
  // copies); dpre = g * gelu'(pre); dpre_bias += its column sums, unrounded; dpre rounded to p.
  linear_backward(nullptr, dw, nullptr, dout, gelu_out, w, N, C, OC, false, p);
  linear_backward(dpre, nullptr, nullptr, dout, gelu_out, w, N, C, OC, false, p);
  gelu_grad_inplace_kernel<<<grid_for(N * C), kBlock, 0, stream_>>>(dpre.f32(), pre.f32(), N * C);
  OCC_CUDA_CHECK_LAUNCH();
  if (dpre_bias) column_sums_add<1>(*this, ColumnOutputs<1>{{dpre_bias}}, DenseRows{dpre.f32(), C}, N, C);
  round_to_precision(dpre.f32(), N * C, p);
}

}  // namespace occ::kernels::cuda
