// Linear layers through cuBLAS (fp32, no TF32). Activations are row-major
// [N, C], weights [OC, C]; cuBLAS is column-major, and a row-major X is the
// column-major X^T, so each product X = A B below is issued as X^T = B^T A^T.
#include "kernels/cuda/reduce.cuh"

namespace occ::kernels::cuda {

namespace {

// out[n, o] = bias[o]: the GEMM then adds onto it (beta = 1), as on the CPU.
__global__ void broadcast_rows_kernel(float* out, const float* bias, int64_t N, int64_t OC) {
  for (int64_t i = global_thread(); i < N * OC; i += grid_threads()) out[i] = bias[i % OC];
}

}  // namespace

void CudaOps::linear_forward(float* out, const float* inp, const float* w, const float* bias, int64_t N, int64_t C,
                             int64_t OC) {
  if (N <= 0 || OC <= 0) return;
  float beta = 0.0f;
  if (bias) {
    broadcast_rows_kernel<<<grid_for(N * OC), kBlock, 0, stream_>>>(out, bias, N, OC);
    OCC_CUDA_CHECK_LAUNCH();
    beta = 1.0f;
  }
  // out^T [OC, N] = w [OC, C] . inp^T [C, N]: op(A) = T on w's column-major view (C x OC).
  gemm(true, false, OC, N, C, 1.0f, w, C, inp, C, beta, out, OC);
}

void CudaOps::linear_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                              const float* w, int64_t N, int64_t C, int64_t OC, bool accumulate_dinp) {
  if (N <= 0) return;
  // dinp [N, C] = dout [N, OC] . w [OC, C]  ->  dinp^T = w^T . dout^T
  if (dinp) gemm(false, false, C, N, OC, 1.0f, w, C, dout, OC, accumulate_dinp ? 1.0f : 0.0f, dinp, C);
  // dw [OC, C] += dout^T . inp  ->  dw^T [C, OC] += inp^T . dout
  if (dw) gemm(false, true, C, OC, N, 1.0f, inp, C, dout, OC, 1.0f, dw, C);
  // dbias [OC] += column sums of dout
  if (dbias) column_sums_add<1>(*this, ColumnOutputs<1>{{dbias}}, DenseRows{dout, OC}, N, OC);
}

}  // namespace occ::kernels::cuda
