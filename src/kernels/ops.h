#pragma once
// The compute backend: every kernel the model, the optimizer and the schedule
// run, behind one interface with a CPU implementation (the reference, wrapping
// kernels.h) and a CUDA one (kernels/cuda/). All pointers are on the ops'
// device; host values (losses, norms) are returned by value. Conventions are
// those of kernels.h: row-major, backward kernels accumulate (+=) into
// parameter gradients.
#include <cstdint>

#include "core/device.h"
#include "core/precision.h"
#include "kernels/kernels.h"

namespace occ::kernels {

// One AdamW step's constants (bias corrections precomputed on the host).
struct AdamWStep {
  float lr, beta1, beta2, eps, weight_decay;
  float bias_correction1, bias_correction2;  // 1 / (1 - beta^step)
};

class Ops {
 public:
  virtual ~Ops() = default;
  virtual Device device() const = 0;
  virtual void synchronize() = 0;

  // ---- memory (same device) --------------------------------------------------
  virtual void copy(float* dst, const float* src, int64_t n) = 0;
  virtual void fill(float* dst, float value, int64_t n) = 0;
  // Rounds x in place to the values of precision p (core/precision.h; a no-op for fp32).
  virtual void round_to_precision(float* x, int64_t n, Precision p) = 0;
  // Copies int32 tokens from the host into device memory.
  virtual void upload_tokens(int32_t* dst, const int32_t* host_src, int64_t n) = 0;

  // ---- dense layers ------------------------------------------------------------
  // `operands`: the format whose values every matrix operand already holds (the
  // input, the weight and the output gradient; in --bf16 / --fp16 the model rounds
  // them to it, core/precision.h). A backend may multiply them in that format with
  // fp32 accumulation: each product is exact in fp32, so the result is the fp32
  // product up to summation order. The GPU does, on its tensor cores; the CPU (the
  // reference) multiplies in fp32 whatever the format. Outputs stay fp32.
  virtual void linear_forward(float* out, const float* inp, const float* w, const float* bias, int64_t N, int64_t C,
                              int64_t OC, Precision operands = Precision::Fp32) = 0;
  virtual void linear_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                               const float* w, int64_t N, int64_t C, int64_t OC, bool accumulate_dinp = false,
                               Precision operands = Precision::Fp32) = 0;
  virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                                 const float* b, int64_t N, int64_t C, float eps) = 0;
  virtual void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                                  const float* w, const float* mean, const float* rstd, int64_t N, int64_t C) = 0;
  virtual void gelu_forward(float* out, const float* inp, int64_t n) = 0;
  virtual void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) = 0;
  virtual void bias_dropout_add_forward(float* out, const float* residual, const float* x, const float* bias,
                                        const Dropout& d, int64_t N, int64_t T, int64_t C) = 0;
  virtual void bias_dropout_add_backward(float* dx, float* dbias, const float* dout, const Dropout& d, int64_t N,
                                         int64_t T, int64_t C) = 0;
  virtual void dropout_inplace(float* x, const Dropout& d, int64_t N, int64_t T, int64_t C) = 0;

  // ---- attention ---------------------------------------------------------------------
  // What forward keeps for backward is the backend's business: the CPU keeps
  // the probabilities (and their dropped copy), a fused GPU kernel keeps only
  // per-row softmax statistics. `saved` holds attention_saved_floats() floats.
  virtual int64_t attention_saved_floats(const AttentionShape& s, const Dropout& d) const = 0;
  virtual void attention_forward(float* out, float* saved, const float* qkv, const AttentionShape& s,
                                 const Dropout& d) = 0;
  virtual void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* saved,
                                  const AttentionShape& s, const Dropout& d) = 0;

  // ---- embeddings --------------------------------------------------------------------
  virtual void embedding_forward(float* out, const int32_t* tokens, const float* wte, int64_t v0, int64_t V,
                                 int64_t N, int64_t C) = 0;
  virtual void embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int64_t v0, int64_t V,
                                  int64_t N, int64_t C) = 0;
  virtual void position_forward(float* out, const float* wpe, int64_t N, int64_t T, int64_t C) = 0;
  virtual void position_backward(float* dwpe, const float* dout, int64_t N, int64_t T, int64_t C) = 0;

  // ---- cross-entropy -----------------------------------------------------------------
  // Vocab-parallel steps (the caller all-reduces between them, see kernels.h).
  virtual void row_max(float* out, const float* logits, int64_t N, int64_t V) = 0;
  virtual void row_sum_exp(float* out, const float* logits, const float* max, int64_t N, int64_t V) = 0;
  virtual void target_logit(float* out, const float* logits, const int32_t* labels, int64_t v0, int64_t N,
                            int64_t V) = 0;
  virtual void cross_entropy_backward_inplace(float* logits, const float* max, const float* sum_exp,
                                              const int32_t* labels, int64_t v0, float scale, int64_t N,
                                              int64_t V) = 0;
  // sum_n log(sum_exp[n]) + max[n] - target[n], accumulated in double.
  virtual double cross_entropy_loss_sum(const float* max, const float* sum_exp, const float* target, int64_t N) = 0;
  // Single-shard path: loss (returned) and, when grad_scale != 0, the gradient in place.
  virtual double cross_entropy_fused(float* logits, const int32_t* labels, float grad_scale, int64_t N,
                                     int64_t V) = 0;

  // ---- optimizer ---------------------------------------------------------------------
  // AdamW over n elements; decay[i] != 0 applies decoupled weight decay.
  virtual void adamw_update(float* params, const float* grads, float* m, float* v, const uint8_t* decay, int64_t n,
                            const AdamWStep& step) = 0;
  // Sum of squares (double accumulation) and in-place scaling.
  virtual double sum_squares(const float* x, int64_t n) = 0;
  virtual void scale(float* x, float factor, int64_t n) = 0;

  // ---- low-rank compression (PowerSGD on the gradients' device) --------------------
  // c[M, N] = op(a) op(b), fp32 products and sums, row-major (kernels.h: matmul).
  virtual void matmul(float* c, const float* a, const float* b, int64_t M, int64_t N, int64_t K, bool trans_a,
                      bool trans_b) = 0;
  // The k columns of a[n, k] orthonormalised in place, spanning what they spanned
  // (the CPU: Householder QR; the GPU: Gram-Schmidt, twice; their columns may
  // differ in sign, which PowerSGD's P P^T does not see).
  virtual void orthonormalize_columns(float* a, int64_t n, int64_t k) = 0;
  virtual void axpy(float* y, float alpha, const float* x, int64_t n) = 0;  // y += alpha x

  // ---- the byte compressors' codes (int8 / fp8, sign, top-k) ---------------------
  // The wire (32-bit words) on this device; kernels.h, row_codes.h.
  virtual void encode_scaled_rows(const float* m, float* wire, int64_t n, int64_t c, RowCode code) = 0;
  virtual void decode_scaled_rows(const float* wire, float* out, int64_t n, int64_t c, RowCode code) = 0;
  virtual void encode_signs(const float* m, float* wire, int64_t n, int64_t c) = 0;
  virtual void decode_signs(const float* wire, float* out, int64_t n, int64_t c) = 0;
  virtual void encode_topk(const float* m, float* wire, int64_t n, int64_t c, int64_t k, bool bitmap) = 0;
  virtual void decode_topk(const float* wire, float* out, int64_t n, int64_t c, int64_t k, bool bitmap) = 0;
};

// The reference backend.
Ops& cpu_ops();
// The backend of `d`; throws occ::Error when `d` is not available in this build.
Ops& ops_for(Device d);

#if defined(OCC_WITH_CUDA)
// Defined in kernels/cuda/ (the CUDA library).
Ops& cuda_ops();
#endif

}  // namespace occ::kernels
