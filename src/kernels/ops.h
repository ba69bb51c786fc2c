#pragma once
// The compute backend: every kernel the model, the optimizer and the schedule
// run, behind one interface with a CPU implementation (the reference, wrapping
// kernels.h) and a CUDA one (kernels/cuda/). All pointers are on the ops'
// device; host values (norms) are returned by value. Conventions are those of
// kernels.h: row-major, backward kernels accumulate (+=) into parameter
// gradients.
//
// Tensors the step computes with (activations, activation gradients, the
// step's copy of the weights) are TensorRefs (core/tensor_ref.h): fp32, or,
// where the backend stores a --bf16 / --fp16 step in 16 bits (the GPU:
// storage_format()), 16-bit values. Within one call every TensorRef has the
// same format, except where a parameter says otherwise. A kernel writing a
// 16-bit tensor rounds each value once, to nearest (ties to even), from its
// fp32 result: the values core/precision.h's rounding gives, which the CPU
// reference obtains by rounding fp32 storage (round_to_precision). Master
// weights, parameter gradients, optimizer state and softmax / LayerNorm
// statistics are always fp32 (float*).
#include <cstdint>
#include <string>

#include "core/device.h"
#include "core/precision.h"
#include "core/tensor_ref.h"
#include "kernels/kernels.h"

namespace occ::kernels {

// A range of a buffer, in elements.
struct Span {
  int64_t offset = 0, numel = 0;
};

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
  // The format this backend stores a step of precision `step` in: the CPU
  // keeps fp32 (rounded values: the reference), the GPU the 16-bit format itself.
  virtual Precision storage_format(Precision step) const = 0;

  // ---- memory (same device) --------------------------------------------------
  // Copies n values, converting between formats (to 16 bits: nearest, ties to even).
  virtual void copy(TensorRef dst, ConstTensorRef src, int64_t n) = 0;
  virtual void fill(TensorRef dst, float value, int64_t n) = 0;
  // Rounds fp32 x in place to the values of precision p (core/precision.h; a no-op for fp32).
  virtual void round_to_precision(float* x, int64_t n, Precision p) = 0;
  // Copies int32 tokens from the host into device memory. The host array may be
  // reused as soon as the call returns; the device may still be copying.
  virtual void upload_tokens(int32_t* dst, const int32_t* host_src, int64_t n) = 0;

  // ---- dense layers ------------------------------------------------------------
  // `operands`: the format whose values fp32 operands already hold (in --bf16 /
  // --fp16 the model rounds them to it, core/precision.h). A backend may
  // multiply them in that format with fp32 accumulation: each product is exact
  // in fp32, so the result is the fp32 product up to summation order. The GPU
  // does, on its tensor cores; the CPU (the reference) multiplies in fp32.
  // 16-bit tensors multiply in their own format. Results are accumulated in fp32
  // and stored in out's format; bias (fp32 or out's format) is added in fp32.
  virtual void linear_forward(TensorRef out, ConstTensorRef inp, ConstTensorRef w, ConstTensorRef bias, int64_t N,
                              int64_t C, int64_t OC, Precision operands = Precision::Fp32) = 0;
  // dinp (+= onto its values when accumulate_dinp) in dinp's format; dw, dbias (fp32) +=.
  virtual void linear_backward(TensorRef dinp, float* dw, float* dbias, ConstTensorRef dout, ConstTensorRef inp,
                               ConstTensorRef w, int64_t N, int64_t C, int64_t OC, bool accumulate_dinp = false,
                               Precision operands = Precision::Fp32) = 0;
  // The MLP's first layer with its GeLU (cuBLASLt's GELU_AUX_BIAS epilogue):
  // with y = inp w^T + bias in fp32, pre = y and out = gelu(y), each rounded to p
  // when stored (GeLU of the unrounded y).
  virtual void linear_gelu_forward(TensorRef pre, TensorRef out, ConstTensorRef inp, ConstTensorRef w,
                                   ConstTensorRef bias, int64_t N, int64_t C, int64_t OC, Precision p) = 0;
  // The backward of out = linear(gelu(pre)) back to pre (cuBLASLt's DGELU_BGRAD
  // epilogue on the input-gradient product): with g = dout w in fp32, dpre =
  // g * gelu'(pre) rounded to p when stored; dpre_bias += column sums of the
  // unrounded dpre (the gradient of the bias that produced pre; nullptr: none;
  // the GPU's 16-bit storage rounds the call's fp32 sums once to the storage
  // format, cuBLASLt's bias-gradient type, before adding them);
  // dw += dout^T gelu_out (the forward's out). N rows, C = pre's width, OC = dout's.
  virtual void linear_backward_gelu(TensorRef dpre, float* dpre_bias, float* dw, ConstTensorRef dout,
                                    ConstTensorRef gelu_out, ConstTensorRef pre, ConstTensorRef w, int64_t N,
                                    int64_t C, int64_t OC, Precision p) = 0;

  // ---- normalisation, residuals, dropout ------------------------------------------
  virtual void layernorm_forward(TensorRef out, float* mean, float* rstd, ConstTensorRef inp, ConstTensorRef w,
                                 ConstTensorRef b, int64_t N, int64_t C, float eps) = 0;
  // dinp +=; dw, db (fp32) +=.
  virtual void layernorm_backward(TensorRef dinp, float* dw, float* db, ConstTensorRef dout, ConstTensorRef inp,
                                  ConstTensorRef w, const float* mean, const float* rstd, int64_t N, int64_t C) = 0;
  // Megatron's bias-dropout-add followed by the next LayerNorm, in one pass:
  // residual_out = residual + dropout(x + bias) rounded to p, then
  // ln_out = LayerNorm(residual_out) rounded to p (from the rounded values).
  virtual void bias_dropout_add_layernorm_forward(TensorRef residual_out, TensorRef ln_out, float* mean, float* rstd,
                                                  ConstTensorRef residual, ConstTensorRef x, ConstTensorRef bias,
                                                  const Dropout& d, ConstTensorRef w, ConstTensorRef b, int64_t N,
                                                  int64_t T, int64_t C, float eps, Precision p) = 0;
  // Its backward, in one pass: dresid += LayerNorm's input gradient (dout: the
  // gradient of ln_out; inp: the forward's residual_out), rounded to p; dw, db +=
  // LayerNorm's parameter gradients; dx = dropout'(dresid) rounded to p (the
  // gradient of x); dbias += column sums of dx (nullptr: none).
  virtual void layernorm_dropout_backward(TensorRef dresid, TensorRef dx, float* dbias, float* dw, float* db,
                                          ConstTensorRef dout, ConstTensorRef inp, ConstTensorRef w,
                                          const float* mean, const float* rstd, const Dropout& d, int64_t N,
                                          int64_t T, int64_t C, Precision p) = 0;
  // RMSNorm (Llama), and its fused pairs: those of LayerNorm above without the
  // mean and the bias (kernels.h rmsnorm_*); rstd (fp32) is its one statistic.
  virtual void rmsnorm_forward(TensorRef out, float* rstd, ConstTensorRef inp, ConstTensorRef w, int64_t N, int64_t C,
                               float eps) = 0;
  // dinp +=; dw (fp32) +=.
  virtual void rmsnorm_backward(TensorRef dinp, float* dw, ConstTensorRef dout, ConstTensorRef inp, ConstTensorRef w,
                                const float* rstd, int64_t N, int64_t C) = 0;
  virtual void bias_dropout_add_rmsnorm_forward(TensorRef residual_out, TensorRef norm_out, float* rstd,
                                                ConstTensorRef residual, ConstTensorRef x, ConstTensorRef bias,
                                                const Dropout& d, ConstTensorRef w, int64_t N, int64_t T, int64_t C,
                                                float eps, Precision p) = 0;
  virtual void rmsnorm_dropout_backward(TensorRef dresid, TensorRef dx, float* dbias, float* dw, ConstTensorRef dout,
                                        ConstTensorRef inp, ConstTensorRef w, const float* rstd, const Dropout& d,
                                        int64_t N, int64_t T, int64_t C, Precision p) = 0;
  virtual void gelu_forward(TensorRef out, ConstTensorRef inp, int64_t n) = 0;
  virtual void gelu_backward(TensorRef dinp, ConstTensorRef inp, ConstTensorRef dout, int64_t n) = 0;
  // SwiGLU (kernels.h): inp [N, 2F] rows [gate | up] -> out [N, F], and back (dinp [N, 2F]).
  virtual void swiglu_forward(TensorRef out, ConstTensorRef inp, int64_t N, int64_t F) = 0;
  virtual void swiglu_backward(TensorRef dinp, ConstTensorRef inp, ConstTensorRef dout, int64_t N, int64_t F) = 0;
  // The MLP's first layer with SwiGLU: pre = inp w^T + bias ([N, 2F]: w is [2F, C],
  // gate rows then up rows) rounded to p when stored, out = swiglu(pre as stored)
  // rounded to p ([N, F]).
  virtual void linear_swiglu_forward(TensorRef pre, TensorRef out, ConstTensorRef inp, ConstTensorRef w,
                                     ConstTensorRef bias, int64_t N, int64_t C, int64_t F, Precision p) = 0;
  // The backward of out = linear(swiglu(pre)) back to pre, in one step (as
  // linear_backward_gelu): with g = dout w in fp32 ([N, F]), dpre = swiglu'(pre) g
  // ([N, 2F]) rounded to p when stored; dpre_bias += column sums of the unrounded
  // dpre (nullptr: none); dw += dout^T act (act: the forward's out [N, F]).
  // N rows, F = act's width, OC = dout's.
  virtual void linear_backward_swiglu(TensorRef dpre, float* dpre_bias, float* dw, ConstTensorRef dout,
                                      ConstTensorRef act, ConstTensorRef pre, ConstTensorRef w, int64_t N, int64_t F,
                                      int64_t OC, Precision p) = 0;
  virtual void bias_dropout_add_forward(TensorRef out, ConstTensorRef residual, ConstTensorRef x,
                                        ConstTensorRef bias, const Dropout& d, int64_t N, int64_t T, int64_t C) = 0;
  virtual void bias_dropout_add_backward(TensorRef dx, float* dbias, ConstTensorRef dout, const Dropout& d, int64_t N,
                                         int64_t T, int64_t C) = 0;
  virtual void dropout_inplace(TensorRef x, const Dropout& d, int64_t N, int64_t T, int64_t C) = 0;

  // ---- attention ---------------------------------------------------------------------
  // What forward keeps for backward is the backend's business: the CPU keeps
  // the probabilities (and their dropped copy), a fused GPU kernel keeps only
  // per-row softmax statistics. `saved` holds attention_saved_floats() floats
  // for q/k/v stored in `storage` (the kernels may differ by format).
  // Backward also gets the forward's output (flash kernels compute rowsum(dout * out) from it).
  virtual int64_t attention_saved_floats(const AttentionShape& s, const Dropout& d,
                                         Precision storage = Precision::Fp32) const = 0;
  virtual void attention_forward(TensorRef out, float* saved, ConstTensorRef qkv, const AttentionShape& s,
                                 const Dropout& d) = 0;
  virtual void attention_backward(TensorRef dqkv, ConstTensorRef dout, ConstTensorRef qkv, ConstTensorRef out,
                                  const float* saved, const AttentionShape& s, const Dropout& d) = 0;
  // RoPE on qkv's q and k heads in place, and its backward on dqkv (kernels.h):
  // each rotated value rounded once to the tensor's format. table: fp32 on this
  // device, kernels::rope_table's layout for T >= s.T positions (T: table_T).
  virtual void rope_forward(TensorRef qkv, const float* table, int64_t table_T, const AttentionShape& s,
                            int64_t rotary_dim) = 0;
  virtual void rope_backward(TensorRef dqkv, const float* table, int64_t table_T, const AttentionShape& s,
                             int64_t rotary_dim) = 0;
  // One line naming the attention implementation this backend runs for a step
  // of precision p (the run's start line prints it).
  virtual std::string attention_description(Precision p) const = 0;
  // One line naming the library and arithmetic of the matrix products for a step
  // of precision p (the run's start line and bench print it: on the CPU it can
  // change the numbers, kernels/cpu_gemm.h).
  virtual std::string gemm_description(Precision p) const = 0;

  // ---- embeddings --------------------------------------------------------------------
  // The output may be fp32 while the weights are 16-bit (the model sums a
  // vocab-parallel embedding in fp32 before storing it rounded).
  virtual void embedding_forward(TensorRef out, const int32_t* tokens, ConstTensorRef wte, int64_t v0, int64_t V,
                                 int64_t N, int64_t C) = 0;
  virtual void embedding_backward(float* dwte, ConstTensorRef dout, const int32_t* tokens, int64_t v0, int64_t V,
                                  int64_t N, int64_t C) = 0;
  virtual void position_forward(TensorRef out, ConstTensorRef wpe, int64_t N, int64_t T, int64_t C) = 0;
  virtual void position_backward(float* dwpe, ConstTensorRef dout, int64_t N, int64_t T, int64_t C) = 0;

  // ---- cross-entropy -----------------------------------------------------------------
  // Losses are summed into *loss_sum, a double in device memory, so that a step
  // needs no host synchronisation until its loss is read (once per iteration).
  // Vocab-parallel steps (the caller all-reduces between them, see kernels.h).
  virtual void row_max(float* out, ConstTensorRef logits, int64_t N, int64_t V) = 0;
  virtual void row_sum_exp(float* out, ConstTensorRef logits, const float* max, int64_t N, int64_t V) = 0;
  virtual void target_logit(float* out, ConstTensorRef logits, const int32_t* labels, int64_t v0, int64_t N,
                            int64_t V) = 0;
  virtual void cross_entropy_backward_inplace(TensorRef logits, const float* max, const float* sum_exp,
                                              const int32_t* labels, int64_t v0, float scale, int64_t N,
                                              int64_t V) = 0;
  // *loss_sum += sum_n log(sum_exp[n]) + max[n] - target[n] (each term in float, summed in double).
  virtual void cross_entropy_loss_sum(double* loss_sum, const float* max, const float* sum_exp, const float* target,
                                      int64_t N) = 0;
  // Single-shard path: *loss_sum += the rows' summed loss and, when grad_scale
  // != 0, the gradient in place (in the logits' format).
  virtual void cross_entropy_fused(TensorRef logits, const int32_t* labels, float grad_scale, int64_t N, int64_t V,
                                   double* loss_sum) = 0;
  // A device double's value on the host (waits for the work queued before it).
  virtual double read_double(const double* device_value) = 0;

  // ---- optimizer ---------------------------------------------------------------------
  // AdamW over n elements; decay[i] != 0 applies decoupled weight decay.
  virtual void adamw_update(float* params, const float* grads, float* m, float* v, const uint8_t* decay, int64_t n,
                            const AdamWStep& step) = 0;
  // Sum of squares (double accumulation) and in-place scaling.
  virtual double sum_squares(const float* x, int64_t n) = 0;
  // The sum of squares of several spans of one buffer in one pass (the global
  // gradient norm: one reduction and one wait per iteration, not one per tensor).
  virtual double sum_squares_spans(const float* base, const Span* spans, int64_t count) = 0;
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
  // ---- the block compressors' codes (mxfp4, nvfp4, int4, int3; block_codes.h) --------
  virtual void encode_blocks(const float* m, float* wire, int64_t n, int64_t c, const BlockCoding& coding) = 0;
  virtual void decode_blocks(const float* wire, float* out, int64_t n, int64_t c, BlockCode code) = 0;
  // ---- the adaptive codec (int4 / lm2 tiles chosen by energy; adaptive_codes.h) --------
  // Decoding a bit map that does not mark H tiles high throws occ::Error (the GPU waits for it).
  virtual void encode_adaptive(const float* m, float* wire, int64_t n, int64_t c, const AdaptiveCoding& coding) = 0;
  virtual void decode_adaptive(const float* wire, float* out, int64_t n, int64_t c, double high_fraction) = 0;
  // ---- top-k with 2-bit values over chunks of the n values (topk2_codes.h) -------------
  // Decoding an index outside its chunk throws occ::Error.
  virtual void encode_topk2(const float* m, float* wire, int64_t n, double density) = 0;
  virtual void decode_topk2(const float* wire, float* out, int64_t n, double density) = 0;
  // ---- the randomized Hadamard rotation before a block code (hadamard.h) ---------------
  // out[n, c] = in's rows rotated in pieces of `block` (inverse: rotated back); in may be out.
  virtual void rotate_rows(const float* in, float* out, int64_t n, int64_t c, int block, uint64_t key,
                           bool inverse) = 0;
};

// The reference backend.
Ops& cpu_ops();
// Chooses the attention kernels of device d's backend (--attention-backend:
// auto | flash | fused | gemm; kernels/cuda/cuda_ops.h). The CPU has one: auto.
void select_attention_backend(Device d, const std::string& name);
// The backend of `d`; throws occ::Error when `d` is not available in this build.
Ops& ops_for(Device d);

#if defined(OCC_WITH_CUDA)
// Defined in kernels/cuda/ (the CUDA library).
Ops& cuda_ops();
#endif

}  // namespace occ::kernels
