#pragma once
// Internal to the CUDA backend (src/kernels/cuda/): the CudaOps class, whose
// member functions are defined in one .cu file per kernel family, and the
// error helpers. Host declarations only (no CUDA syntax), so host C++ files
// of the backend can include it too.
//
// Execution model: everything runs in order on one stream (the legacy default
// stream), so kernels need no events between them and host<->device copies
// made elsewhere with cudaMemcpy (core/device.cpp) are ordered with them.
// Every reduction has a fixed shape and order (no floating-point atomics), so
// a run repeats bit for bit on the same GPU model.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/lt_matmul.h"

namespace occ::kernels::cuda {

// Throw occ::Error. Defined in cuda_error.cpp, which the host compiler builds:
// core/error.h's {fmt} does not compile under nvcc.
[[noreturn]] void throw_cuda_error(const char* call, const char* detail, const char* file, int line);
[[noreturn]] void throw_error(const std::string& message);
// Internal-error check: every tensor of one call has `format` (ops.h's rule).
void require_format(Precision format, std::initializer_list<ConstTensorRef> tensors, const char* op);

#define OCC_CUDA_CHECK(expr)                                                                   \
  do {                                                                                         \
    const cudaError_t occ_e_ = (expr);                                                         \
    if (occ_e_ != cudaSuccess)                                                                 \
      ::occ::kernels::cuda::throw_cuda_error(#expr, cudaGetErrorString(occ_e_), __FILE__, __LINE__); \
  } while (0)

#define OCC_CUBLAS_CHECK(expr)                                                                     \
  do {                                                                                             \
    const cublasStatus_t occ_s_ = (expr);                                                          \
    if (occ_s_ != CUBLAS_STATUS_SUCCESS)                                                           \
      ::occ::kernels::cuda::throw_cuda_error(#expr, cublasGetStatusString(occ_s_), __FILE__, __LINE__); \
  } while (0)

// After a <<<...>>> launch: reports a bad launch configuration at its source
// (an error inside the kernel surfaces at the next synchronising call).
#define OCC_CUDA_CHECK_LAUNCH() OCC_CUDA_CHECK(cudaGetLastError())

class CudaOps final : public Ops {
 public:
  explicit CudaOps(CudaAttention attention);
  void set_attention(CudaAttention attention) { attention_ = attention; }
  ~CudaOps() override;
  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  Device device() const override { return Device::Cuda; }
  void synchronize() override;

  Precision storage_format(Precision step) const override { return step; }

  void copy(TensorRef dst, ConstTensorRef src, int64_t n) override;
  void fill(TensorRef dst, float value, int64_t n) override;
  void upload_tokens(int32_t* dst, const int32_t* host_src, int64_t n) override;
  void round_to_precision(float* x, int64_t n, Precision p) override;

  void linear_forward(TensorRef out, ConstTensorRef inp, ConstTensorRef w, ConstTensorRef bias, int64_t N, int64_t C,
                      int64_t OC, Precision operands) override;
  void linear_backward(TensorRef dinp, float* dw, float* dbias, ConstTensorRef dout, ConstTensorRef inp,
                       ConstTensorRef w, int64_t N, int64_t C, int64_t OC, bool accumulate_dinp,
                       Precision operands) override;
  void linear_gelu_forward(TensorRef pre, TensorRef out, ConstTensorRef inp, ConstTensorRef w, ConstTensorRef bias,
                           int64_t N, int64_t C, int64_t OC, Precision p) override;
  void linear_backward_gelu(TensorRef dpre, float* dpre_bias, float* dw, ConstTensorRef dout, ConstTensorRef gelu_out,
                            ConstTensorRef pre, ConstTensorRef w, int64_t N, int64_t C, int64_t OC,
                            Precision p) override;
  void layernorm_forward(TensorRef out, float* mean, float* rstd, ConstTensorRef inp, ConstTensorRef w,
                         ConstTensorRef b, int64_t N, int64_t C, float eps) override;
  void layernorm_backward(TensorRef dinp, float* dw, float* db, ConstTensorRef dout, ConstTensorRef inp,
                          ConstTensorRef w, const float* mean, const float* rstd, int64_t N, int64_t C) override;
  void bias_dropout_add_layernorm_forward(TensorRef residual_out, TensorRef ln_out, float* mean, float* rstd,
                                          ConstTensorRef residual, ConstTensorRef x, ConstTensorRef bias,
                                          const Dropout& d, ConstTensorRef w, ConstTensorRef b, int64_t N, int64_t T,
                                          int64_t C, float eps, Precision p) override;
  void layernorm_dropout_backward(TensorRef dresid, TensorRef dx, float* dbias, float* dw, float* db,
                                  ConstTensorRef dout, ConstTensorRef inp, ConstTensorRef w, const float* mean,
                                  const float* rstd, const Dropout& d, int64_t N, int64_t T, int64_t C,
                                  Precision p) override;
  void rmsnorm_forward(TensorRef out, float* rstd, ConstTensorRef inp, ConstTensorRef w, int64_t N, int64_t C,
                       float eps) override;
  void rmsnorm_backward(TensorRef dinp, float* dw, ConstTensorRef dout, ConstTensorRef inp, ConstTensorRef w,
                        const float* rstd, int64_t N, int64_t C) override;
  void bias_dropout_add_rmsnorm_forward(TensorRef residual_out, TensorRef norm_out, float* rstd,
                                        ConstTensorRef residual, ConstTensorRef x, ConstTensorRef bias,
                                        const Dropout& d, ConstTensorRef w, int64_t N, int64_t T, int64_t C, float eps,
                                        Precision p) override;
  void rmsnorm_dropout_backward(TensorRef dresid, TensorRef dx, float* dbias, float* dw, ConstTensorRef dout,
                                ConstTensorRef inp, ConstTensorRef w, const float* rstd, const Dropout& d, int64_t N,
                                int64_t T, int64_t C, Precision p) override;
  void swiglu_forward(TensorRef out, ConstTensorRef inp, int64_t N, int64_t F) override;
  void swiglu_backward(TensorRef dinp, ConstTensorRef inp, ConstTensorRef dout, int64_t N, int64_t F) override;
  void linear_swiglu_forward(TensorRef pre, TensorRef out, ConstTensorRef inp, ConstTensorRef w, ConstTensorRef bias,
                             int64_t N, int64_t C, int64_t F, Precision p) override;
  void linear_backward_swiglu(TensorRef dpre, float* dpre_bias, float* dw, ConstTensorRef dout, ConstTensorRef act,
                              ConstTensorRef pre, ConstTensorRef w, int64_t N, int64_t F, int64_t OC,
                              Precision p) override;
  void rope_forward(TensorRef qkv, const float* table, int64_t table_T, const AttentionShape& s,
                    int64_t rotary_dim) override;
  void rope_backward(TensorRef dqkv, const float* table, int64_t table_T, const AttentionShape& s,
                     int64_t rotary_dim) override;
  void gelu_forward(TensorRef out, ConstTensorRef inp, int64_t n) override;
  void gelu_backward(TensorRef dinp, ConstTensorRef inp, ConstTensorRef dout, int64_t n) override;
  void bias_dropout_add_forward(TensorRef out, ConstTensorRef residual, ConstTensorRef x, ConstTensorRef bias,
                                const Dropout& d, int64_t N, int64_t T, int64_t C) override;
  void bias_dropout_add_backward(TensorRef dx, float* dbias, ConstTensorRef dout, const Dropout& d, int64_t N,
                                 int64_t T, int64_t C) override;
  void dropout_inplace(TensorRef x, const Dropout& d, int64_t N, int64_t T, int64_t C) override;

  int64_t attention_saved_floats(const AttentionShape& s, const Dropout& d, Precision storage) const override;
  void attention_forward(TensorRef out, float* saved, ConstTensorRef qkv, const AttentionShape& s,
                         const Dropout& d) override;
  void attention_backward(TensorRef dqkv, ConstTensorRef dout, ConstTensorRef qkv, ConstTensorRef out,
                          const float* saved, const AttentionShape& s, const Dropout& d) override;
  std::string attention_description(Precision p) const override;
  std::string gemm_description(Precision p) const override;

  void embedding_forward(TensorRef out, const int32_t* tokens, ConstTensorRef wte, int64_t v0, int64_t V, int64_t N,
                         int64_t C) override;
  void embedding_backward(float* dwte, ConstTensorRef dout, const int32_t* tokens, int64_t v0, int64_t V, int64_t N,
                          int64_t C) override;
  void position_forward(TensorRef out, ConstTensorRef wpe, int64_t N, int64_t T, int64_t C) override;
  void position_backward(float* dwpe, ConstTensorRef dout, int64_t N, int64_t T, int64_t C) override;

  void row_max(float* out, ConstTensorRef logits, int64_t N, int64_t V) override;
  void row_sum_exp(float* out, ConstTensorRef logits, const float* max, int64_t N, int64_t V) override;
  void target_logit(float* out, ConstTensorRef logits, const int32_t* labels, int64_t v0, int64_t N,
                    int64_t V) override;
  void cross_entropy_backward_inplace(TensorRef logits, const float* max, const float* sum_exp, const int32_t* labels,
                                      int64_t v0, float scale, int64_t N, int64_t V) override;
  void cross_entropy_loss_sum(double* loss_sum, const float* max, const float* sum_exp, const float* target,
                              int64_t N) override;
  void cross_entropy_fused(TensorRef logits, const int32_t* labels, float grad_scale, int64_t N, int64_t V,
                           double* loss_sum) override;
  double read_double(const double* device_value) override;

  void adamw_update(float* params, const float* grads, float* m, float* v, const uint8_t* decay, int64_t n,
                    const AdamWStep& step) override;
  double sum_squares(const float* x, int64_t n) override;
  double sum_squares_spans(const float* base, const Span* spans, int64_t count) override;
  void scale(float* x, float factor, int64_t n) override;

  void matmul(float* c, const float* a, const float* b, int64_t M, int64_t N, int64_t K, bool trans_a,
              bool trans_b) override;
  void orthonormalize_columns(float* a, int64_t n, int64_t k) override;
  void axpy(float* y, float alpha, const float* x, int64_t n) override;
  void encode_scaled_rows(const float* m, float* wire, int64_t n, int64_t c, RowCode code) override;
  void decode_scaled_rows(const float* wire, float* out, int64_t n, int64_t c, RowCode code) override;
  void encode_signs(const float* m, float* wire, int64_t n, int64_t c) override;
  void decode_signs(const float* wire, float* out, int64_t n, int64_t c) override;
  void encode_topk(const float* m, float* wire, int64_t n, int64_t c, int64_t k, bool bitmap) override;
  void decode_topk(const float* wire, float* out, int64_t n, int64_t c, int64_t k, bool bitmap) override;
  void encode_blocks(const float* m, float* wire, int64_t n, int64_t c, const BlockCoding& coding) override;
  void decode_blocks(const float* wire, float* out, int64_t n, int64_t c, BlockCode code) override;
  void rotate_rows(const float* in, float* out, int64_t n, int64_t c, int block, uint64_t key, bool inverse) override;
  void encode_adaptive(const float* m, float* wire, int64_t n, int64_t c, const AdaptiveCoding& coding) override;
  void decode_adaptive(const float* wire, float* out, int64_t n, int64_t c, double high_fraction) override;
  void encode_topk2(const float* m, float* wire, int64_t n, double density) override;
  void decode_topk2(const float* wire, float* out, int64_t n, double density) override;

  // ---- for the kernel files ------------------------------------------------------
  cudaStream_t stream() const { return stream_; }
  // Device scratch of at least `bytes` (256-byte aligned), valid until the next
  // call: an op asks once and carves what it needs out of it. Grows, never shrinks.
  void* scratch(size_t bytes);
  // Column-major GEMM, fp32 inputs/outputs with fp32 accumulation (no TF32):
  // C[m, n] = alpha op(A) op(B) + beta C, repeated over `batch` matrices that
  // lie stride_* floats apart. Row-major callers pass the transposed problem.
  void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* A, int64_t lda,
            const float* B, int64_t ldb, float beta, float* C, int64_t ldc, int64_t batch = 1, int64_t stride_a = 0,
            int64_t stride_b = 0, int64_t stride_c = 0);
  // The same GEMM with A and B in a 16-bit format (bf16 or fp16: 2-byte values,
  // leading dimensions in elements), fp32 C and fp32 accumulation: tensor cores.
  void gemm_16bit(Precision format, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const void* A, int64_t lda, const void* B, int64_t ldb, float beta, float* C, int64_t ldc);
  // The cuBLASLt GEMMs of 16-bit tensors (created, and cuBLASLt loaded, on first use).
  LtMatmul& lt();
  // Device memory of at least `bytes` (256-byte aligned) for 16-bit copies of
  // GEMM operands, separate from scratch() so that an op may use both; valid
  // until the next call. Grows, never shrinks.
  void* operand_buffer(size_t bytes);

 private:
  // Whether this shape and storage run the tensor-core kernels, and else
  // whether the fp32 fused attention kernels (else the batched GEMMs).
  bool use_flash_attention(const AttentionShape& s, Precision storage) const;
  bool use_fused_attention(const AttentionShape& s) const;
  void attention_forward_gemm(float* out, float* saved, const float* qkv, const AttentionShape& s, const Dropout& d);
  void attention_backward_gemm(float* dqkv, const float* dout, const float* qkv, const float* saved,
                               const AttentionShape& s, const Dropout& d);
  void attention_forward_fused(float* out, float* saved, const float* qkv, const AttentionShape& s, const Dropout& d);
  void attention_backward_fused(float* dqkv, const float* dout, const float* qkv, const float* saved,
                                const AttentionShape& s, const Dropout& d);

  CudaAttention attention_;
  cudaStream_t stream_ = nullptr;  // legacy default stream
  cublasHandle_t blas_ = nullptr;
  std::unique_ptr<LtMatmul> lt_;
  void* blas_workspace_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  void* operands_ = nullptr;
  size_t operands_bytes_ = 0;
  // upload_tokens' ring of page-locked host slots, each with the event of its last copy.
  struct TokenSlot {
    int32_t* host = nullptr;
    int64_t capacity = 0;
    cudaEvent_t event = nullptr;
  };
  static constexpr int kTokenSlots = 8;
  TokenSlot token_slots_[kTokenSlots];
  int next_token_slot_ = 0;
};

}  // namespace occ::kernels::cuda
