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

void CudaOps::linear_forward(float* out, const float* inp, const float* w, const float* bias, int64_t N, int64_t C,
                             int64_t OC, Precision operands) {
  if (N <= 0 || OC <= 0) return;
  float beta = 0.0f;
  if (bias) {
    broadcast_rows_kernel<<<grid_for(N * OC), kBlock, 0, stream_>>>(out, bias, N, OC);
    OCC_CUDA_CHECK_LAUNCH();
    beta = 1.0f;
  }
  // out^T [OC, N] = w [OC, C] . inp^T [C, N]: op(A) = T on w's column-major view (C x OC).
  if (sixteen_bit(operands) && C > 0) {
    SixteenBitOperands lp(*this, operands, {OC * C, N * C});
    const void* w16 = lp.copy(w, OC * C);
    const void* inp16 = lp.copy(inp, N * C);
    gemm_16bit(operands, true, false, OC, N, C, 1.0f, w16, C, inp16, C, beta, out, OC);
  } else {
    gemm(true, false, OC, N, C, 1.0f, w, C, inp, C, beta, out, OC);
  }
}

void CudaOps::linear_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                              const float* w, int64_t N, int64_t C, int64_t OC, bool accumulate_dinp,
                              Precision operands) {
  if (N <= 0) return;
  // dbias [OC] += column sums of dout (fp32, from the fp32 copy)
  if (dbias) column_sums_add<1>(*this, ColumnOutputs<1>{{dbias}}, DenseRows{dout, OC}, N, OC);
  if (sixteen_bit(operands) && C > 0 && OC > 0) {
    SixteenBitOperands lp(*this, operands, {N * OC, dinp ? OC * C : 0, dw ? N * C : 0});
    const void* dout16 = lp.copy(dout, N * OC);
    if (dinp) gemm_16bit(operands, false, false, C, N, OC, 1.0f, lp.copy(w, OC * C), C, dout16, OC,
                         accumulate_dinp ? 1.0f : 0.0f, dinp, C);
    if (dw) gemm_16bit(operands, false, true, C, OC, N, 1.0f, lp.copy(inp, N * C), C, dout16, OC, 1.0f, dw, C);
    return;
  }
  // dinp [N, C] = dout [N, OC] . w [OC, C]  ->  dinp^T = w^T . dout^T
  if (dinp) gemm(false, false, C, N, OC, 1.0f, w, C, dout, OC, accumulate_dinp ? 1.0f : 0.0f, dinp, C);
  // dw [OC, C] += dout^T . inp  ->  dw^T [C, OC] += inp^T . dout
  if (dw) gemm(false, true, C, OC, N, 1.0f, inp, C, dout, OC, 1.0f, dw, C);
}

}  // namespace occ::kernels::cuda
