// Linear layers through cuBLAS. Activations are row-major [N, C], weights
// [OC, C]; cuBLAS is column-major, and a row-major X is the column-major X^T,
// so each product X = A B below is issued as X^T = B^T A^T.
//
// fp32 operands multiply in fp32 (no TF32: the reference numerics). Operands
// that hold bf16 or fp16 values (ops.h) are copied to that format, exactly, and
// multiply on the tensor cores with fp32 accumulation: the same products, summed
// in another order, at a fraction of the time.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

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

// out[n, o] = bias[o] in out's storage, so that the GEMM adds onto it (beta = 1).
template <class S, class B>
__global__ void broadcast_bias_kernel(S* out, const B* bias, int64_t N, int64_t OC) {
  for (int64_t i = global_thread(); i < N * OC; i += grid_threads()) out[i] = narrow<S>(widen(bias[i % OC]));
}

// pre = y, out = gelu(y), each rounded once to S (GeLU of the unrounded fp32 y).
template <class S>
__global__ void gelu_split_kernel(S* pre, S* out, const float* y, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float x = y[i];
    pre[i] = narrow<S>(x);
    out[i] = narrow<S>(gelu_value(x));
  }
}

// dpre = g * gelu'(pre), rounded to S (g unrounded fp32).
template <class S>
__global__ void gelu_grad_kernel(S* dpre, const float* g, const S* pre, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) dpre[i] = narrow<S>(g[i] * gelu_slope(widen(pre[i])));
}

// Column-sum functors over 16-bit rows and over g * gelu'(pre).
template <class S>
struct StoredRows {
  const S* x;
  int64_t C;
  __device__ __forceinline__ void operator()(int64_t n, int64_t c, float (&v)[1]) const { v[0] = widen(x[n * C + c]); }
};
template <class S>
struct GeluGradRows {
  const float* g;
  const S* pre;
  int64_t C;
  __device__ __forceinline__ void operator()(int64_t n, int64_t c, float (&v)[1]) const {
    v[0] = g[n * C + c] * gelu_slope(widen(pre[n * C + c]));
  }
};

cudaDataType cuda_type(Precision p) {
  return p == Precision::Bf16 ? CUDA_R_16BF : p == Precision::Fp16 ? CUDA_R_16F : CUDA_R_32F;
}

}  // namespace

void CudaOps::gemm_ex(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, ConstTensorRef A, int64_t lda,
                      ConstTensorRef B, int64_t ldb, float beta, TensorRef C, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  const float alpha = 1.0f;
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  // CUBLAS_COMPUTE_32F: products and sums in fp32 (never TF32 or 16-bit compute).
  OCC_CUBLAS_CHECK(cublasGemmEx(blas_, op_a, op_b, int(m), int(n), int(k), &alpha, A.data(), cuda_type(A.format()),
                                int(lda), B.data(), cuda_type(B.format()), int(ldb), &beta, C.data(),
                                cuda_type(C.format()), int(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void CudaOps::linear_forward(TensorRef out, ConstTensorRef inp, ConstTensorRef w, ConstTensorRef bias, int64_t N,
                             int64_t C, int64_t OC, Precision operands) {
  if (N <= 0 || OC <= 0) return;
  if (!inp.is_fp32()) {
    // 16-bit tensors: straight to the tensor cores, the result rounded once into out.
    require_format(inp.format(), {out, w}, "linear_forward");
    float beta = 0.0f;
    if (bias) {
      with_storage(out.format(), [&](auto s) {
        using S = decltype(s);
        with_storage(bias.format(), [&](auto b) {
          using Bt = decltype(b);
          broadcast_bias_kernel<<<grid_for(N * OC), kBlock, 0, stream_>>>(typed<S>(out), typed<Bt>(bias), N, OC);
        });
      });
      OCC_CUDA_CHECK_LAUNCH();
      beta = 1.0f;
    }
    if (C > 0) gemm_ex(true, false, OC, N, C, w, C, inp, C, beta, out, OC);
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
    if (dbias) {
      with_storage(dout.format(), [&](auto s) {
        using S = decltype(s);
        column_sums_add<1>(*this, ColumnOutputs<1>{{dbias}}, StoredRows<S>{typed<S>(dout), OC}, N, OC);
      });
    }
    if (C <= 0 || OC <= 0) return;
    // dinp^T [C, N] = w^T . dout^T, in dinp's format (beta reads its old values).
    if (dinp) gemm_ex(false, false, C, N, OC, w, C, dout, OC, accumulate_dinp ? 1.0f : 0.0f, dinp, C);
    // dw^T [C, OC] += inp^T . dout in fp32.
    if (dw) gemm_ex(false, true, C, OC, N, inp, C, dout, OC, 1.0f, TensorRef(dw, Precision::Fp32), C);
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
  // y = inp w^T + bias in fp32, then pre = y and out = gelu(y), each rounded once.
  float* y = static_cast<float*>(operand_buffer(sizeof(float) * size_t(N * OC)));
  if (inp.is_fp32()) {
    linear_forward(TensorRef(y, Precision::Fp32), inp, w, bias, N, C, OC, p);
  } else {
    float beta = 0.0f;
    if (bias) {
      with_storage(bias.format(), [&](auto b) {
        using Bt = decltype(b);
        broadcast_bias_kernel<<<grid_for(N * OC), kBlock, 0, stream_>>>(y, typed<Bt>(bias), N, OC);
      });
      OCC_CUDA_CHECK_LAUNCH();
      beta = 1.0f;
    }
    if (C > 0) gemm_ex(true, false, OC, N, C, w, C, inp, C, beta, TensorRef(y, Precision::Fp32), OC);
  }
  if (pre.is_fp32()) {
    gelu_split_kernel<float><<<grid_for(N * OC), kBlock, 0, stream_>>>(pre.f32(), out.f32(), y, N * OC);
    OCC_CUDA_CHECK_LAUNCH();
    round_to_precision(pre.f32(), N * OC, p);
    round_to_precision(out.f32(), N * OC, p);
    return;
  }
  with_storage(pre.format(), [&](auto s) {
    using S = decltype(s);
    gelu_split_kernel<S><<<grid_for(N * OC), kBlock, 0, stream_>>>(typed<S>(pre), typed<S>(out), y, N * OC);
  });
  OCC_CUDA_CHECK_LAUNCH();
}

void CudaOps::linear_backward_gelu(TensorRef dpre, float* dpre_bias, float* dw, ConstTensorRef dout,
                                   ConstTensorRef gelu_out, ConstTensorRef pre, ConstTensorRef w, int64_t N, int64_t C,
                                   int64_t OC, Precision p) {
  if (N <= 0) return;
  // dw += dout^T gelu_out; g = dout w in fp32; dpre = g * gelu'(pre) rounded once.
  linear_backward(nullptr, dw, nullptr, dout, gelu_out, w, N, C, OC, false, p);
  float* g = static_cast<float*>(operand_buffer(sizeof(float) * size_t(N * C)));
  if (dout.is_fp32()) {
    linear_backward(TensorRef(g, Precision::Fp32), nullptr, nullptr, dout, gelu_out, w, N, C, OC, false, p);
  } else if (C > 0 && OC > 0) {
    gemm_ex(false, false, C, N, OC, w, C, dout, OC, 0.0f, TensorRef(g, Precision::Fp32), C);
  }
  with_storage(pre.format(), [&](auto s) {
    using S = decltype(s);
    if (dpre_bias)
      column_sums_add<1>(*this, ColumnOutputs<1>{{dpre_bias}}, GeluGradRows<S>{g, typed<S>(pre), C}, N, C);
    gelu_grad_kernel<S><<<grid_for(N * C), kBlock, 0, stream_>>>(typed<S>(dpre), g, typed<S>(pre), N * C);
  });
  OCC_CUDA_CHECK_LAUNCH();
  if (dpre.is_fp32()) round_to_precision(dpre.f32(), N * C, p);
}

}  // namespace occ::kernels::cuda
