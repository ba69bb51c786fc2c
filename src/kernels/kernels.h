#pragma once
// CPU kernels on row-major buffers. Activations are [N, features] with
// N = micro_batch * seq rows ordered (sample, token). Backward kernels
// accumulate (+=) into parameter gradients, so micro-batches add up.
#include <cstdint>

#include "core/precision.h"
#include "core/rng.h"  // OCC_HD
#include "kernels/adaptive_codes.h"
#include "kernels/block_codes.h"
#include "kernels/hadamard.h"
#include "kernels/row_codes.h"
#include "kernels/topk2_codes.h"

namespace occ::kernels {

// ---- linear layers (cpu_gemm.h: oneDNN or OpenBLAS) ----------------------------
// `operands`: the format the inputs' values already hold (Bf16: multiplied in
// bf16 with fp32 accumulation where the CPU can, cpu_gemm.h).
// out[N, OC] = inp[N, C] . w[OC, C]^T (+ bias[OC] when bias != nullptr)
void linear_forward(float* out, const float* inp, const float* w, const float* bias, int64_t N, int64_t C, int64_t OC,
                    Precision operands = Precision::Fp32);
// dinp[N, C] = dout . w (+= when accumulate), dw[OC, C] += dout^T . inp,
// dbias[OC] += column sums of dout (skipped when nullptr).
void linear_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp, const float* w,
                     int64_t N, int64_t C, int64_t OC, bool accumulate_dinp = false,
                     Precision operands = Precision::Fp32);
// sums[C] += column sums of x[N, C] (the order of additions linear_backward's dbias uses).
void add_column_sums(float* sums, const float* x, int64_t N, int64_t C);

// ---- layer norm ------------------------------------------------------------
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                       int64_t N, int64_t C, float eps);
// dinp[N, C] += ..., dw, db += ...
void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                        const float* mean, const float* rstd, int64_t N, int64_t C);

// ---- RMSNorm (Llama): out = inp / sqrt(mean(inp^2) + eps) * w -----------------------
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int64_t N, int64_t C, float eps);
// dinp[N, C] += ..., dw += sum over rows of dout * inp * rstd
void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, const float* rstd,
                      int64_t N, int64_t C);

// ---- GeLU (tanh approximation) -----------------------------------------------
void gelu_forward(float* out, const float* inp, int64_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n);  // dinp = dout * gelu'(inp)

// ---- SwiGLU: out[N, F] = silu(gate) * up, rows of inp[N, 2F] = [gate (F) | up (F)] ----
// silu(x) = x / (1 + e^-x).
void swiglu_forward(float* out, const float* inp, int64_t N, int64_t F);
// dinp[N, 2F] = [dout * up * silu'(gate) | dout * silu(gate)] (dinp must not alias inp or dout).
void swiglu_backward(float* dinp, const float* inp, const float* dout, int64_t N, int64_t F);

// ---- dropout -----------------------------------------------------------------
// A dropout site: the mask of element (sample, index) is keep = U(key, sample,
// index) >= p, where sample = sample_base + row / rows_per_sample is the
// sample's position in the global batch. Masks are regenerated in backward.
// row0: the micro-batch row of the tensor's row 0. Sequence parallelism
// hands a kernel one TP rank's contiguous share of the [B*T] rows, which may
// start inside a sample; row0 keeps every element on its global coordinates,
// so the masks equal those of the whole tensor.
struct Dropout {
  uint64_t key = 0;
  float p = 0.0f;
  int64_t sample_base = 0;
  int64_t row0 = 0;
  bool active() const { return p > 0.0f; }
  // Element (n, c) of an [N, C] tensor with T rows per sample: its sample, and its index in the sample.
  uint64_t sample_of(int64_t n, int64_t T) const { return uint64_t(sample_base + (row0 + n) / T); }
  uint64_t index_of(int64_t n, int64_t T, int64_t C) const { return uint64_t((row0 + n) % T) * uint64_t(C); }
};

// out[N, C] = residual + dropout(x + bias)  (Megatron's bias-dropout-add); T = tokens per sample.
// bias (and below dbias) may be null: no bias (--disable-bias-linear).
void bias_dropout_add_forward(float* out, const float* residual, const float* x, const float* bias,
                              const Dropout& d, int64_t N, int64_t T, int64_t C);
// dx[N, C] = dropout'(dout); dbias += column sums of dx. (The residual's gradient is dout itself.)
void bias_dropout_add_backward(float* dx, float* dbias, const float* dout, const Dropout& d, int64_t N, int64_t T,
                               int64_t C);
// In-place dropout of [N, C] (embedding dropout) and its backward (same mask).
void dropout_inplace(float* x, const Dropout& d, int64_t N, int64_t T, int64_t C);

// ---- attention -----------------------------------------------------------------
// qkv[N, (H + 2 G) * D]: the H query heads in G groups (grouped-query attention;
// G = H without it), features ordered per group [q of its H/G heads | k | v][D]
// (Megatron's fused QKV; without GQA [head][q|k|v][D]); out[N, H*D]. Query head h
// attends with the k and v of group h / (H/G).
// probs[B, H, T, T]: softmax (causal); probs_dropped: after attention dropout
// (== probs storage may be shared when dropout is off). head0 = global index of
// local head 0 (dropout coordinates), H_total = heads in the whole model.
struct AttentionShape {
  int64_t B, T, H, D;
  int64_t head0 = 0, H_total = 0;
  int64_t KV = 0;  // k/v heads (query groups) of this shard; 0: H (one per query head)
  // What q, k, v and the output's gradient hold: Bf16 lets the CPU multiply
  // QK^T and dY V^T in bf16 (exact products, fp32 sums); the probabilities and
  // dS stay fp32 there. The GPU's kernels go by the tensors' formats instead.
  Precision operands = Precision::Fp32;

  OCC_HD int64_t kv_heads() const { return KV > 0 ? KV : H; }
  OCC_HD int64_t group_size() const { return H / kv_heads(); }  // query heads per k/v head
  OCC_HD int64_t qkv_width() const { return (H + 2 * kv_heads()) * D; }  // row stride of qkv
  // Feature offsets within a qkv row: query head h's q, k/v head g's k and v.
  OCC_HD int64_t q_offset(int64_t h) const {
    const int64_t r = group_size();
    return ((h / r) * (r + 2) + h % r) * D;
  }
  OCC_HD int64_t k_offset(int64_t g) const { return (g * (group_size() + 2) + group_size()) * D; }
  OCC_HD int64_t v_offset(int64_t g) const { return k_offset(g) + D; }
  OCC_HD int64_t group_of(int64_t h) const { return h / group_size(); }
};
void attention_forward(float* out, float* probs, float* probs_dropped, const float* qkv, const AttentionShape& s,
                       const Dropout& d);
// dk, dv of a k/v head sum over its group's query heads (in head order).
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* probs,
                        const float* probs_dropped, const AttentionShape& s, const Dropout& d);

// Incremental decoding (generate's KV cache): qkv [n, s.qkv_width()] holds
// positions 0..n-1 of one sequence (q and k rotated); out [s.H * s.D] is the
// attention of row n-1's query heads over all n positions, the row
// attention_forward computes for it (no dropout; sums in another order).
void attention_decode(float* out, const float* qkv, int64_t n, const AttentionShape& s);

// ---- rotary position embeddings (RoPE) -----------------------------------------------
// Applied in place to the q and k heads of qkv [N, s.qkv_width()] (rows ordered
// (sample, token): position t = row % s.T), on the first `rotary_dim` features
// of each head, in the rotate-half layout (Megatron's default and Hugging
// Face's Llama): feature i pairs with i + rotary_dim/2 (i < rotary_dim/2),
//   y_i = x_i cos(t w_i) - x_{i+r/2} sin(t w_i),  y_{i+r/2} = x_{i+r/2} cos(t w_i) + x_i sin(t w_i),
// w_i = base^(-2i / rotary_dim); the other features (and v) pass unchanged.
// table: cos(t w_i) at [t * rotary_dim/2 + i] for t < table_T (>= s.T), then
// sin(t w_i) at table_T * rotary_dim/2 onwards (rope_table() fills it).
void rope_forward(float* qkv, const float* table, int64_t table_T, const AttentionShape& s, int64_t rotary_dim);
// The backward: the rotation by -t w_i of the q and k gradients, in place.
void rope_backward(float* dqkv, const float* table, int64_t table_T, const AttentionShape& s, int64_t rotary_dim);
// Fills table (2 * T * rotary_dim/2 floats) for base `base`: the angles in double,
// cos and sin rounded once to float, so that every backend rotates by the same values.
void rope_table(float* table, int64_t T, int64_t rotary_dim, double base);

// ---- embeddings (vocab-parallel: this rank holds rows [v0, v0 + V)) -----------------
// out[N, C] = wte[tok - v0] for tokens in the shard, 0 elsewhere.
void embedding_forward(float* out, const int32_t* tokens, const float* wte, int64_t v0, int64_t V, int64_t N,
                       int64_t C);
void embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int64_t v0, int64_t V, int64_t N,
                        int64_t C);
// out[N, C] += wpe[t] with t = row % T; dwpe[t] += dout rows.
void position_forward(float* out, const float* wpe, int64_t N, int64_t T, int64_t C);
void position_backward(float* dwpe, const float* dout, int64_t N, int64_t T, int64_t C);

// ---- vocab-parallel cross-entropy ------------------------------------------------
// logits[N, V] of this rank's vocabulary shard [v0, v0 + V). Steps between which
// the caller all-reduces over the TP group: row_max (max), sum_exp and
// target_logit (sum).
void row_max(float* out, const float* logits, int64_t N, int64_t V);
void row_sum_exp(float* out, const float* logits, const float* max, int64_t N, int64_t V);
void target_logit(float* out, const float* logits, const int32_t* labels, int64_t v0, int64_t N, int64_t V);
// Turns logits into d loss / d logits in place: scale * (softmax - onehot).
void cross_entropy_backward_inplace(float* logits, const float* max, const float* sum_exp, const int32_t* labels,
                                    int64_t v0, float scale, int64_t N, int64_t V);
// Single-shard fast path: per row max, sum-exp, loss and (when grad_scale != 0)
// the gradient in place, while the row is hot in cache. Returns the summed loss.
double cross_entropy_fused(float* logits, const int32_t* labels, float grad_scale, int64_t N, int64_t V);

// ---- low-rank compression (PowerSGD, compress/) ----------------------------------
// c[M, N] = op(a) op(b) in fp32, row-major: op(a) is [M, K] (a is stored [K, M]
// when trans_a), op(b) is [K, N] (b stored [N, K] when trans_b).
void matmul(float* c, const float* a, const float* b, int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b);
// Orthonormalises the k columns of a[n, k] (row-major, n >= k) in place:
// Householder QR (LAPACK), stable also when a is rank-deficient.
void orthonormalize_columns(float* a, int64_t n, int64_t k);
// y[i] += alpha * x[i]
void axpy(float* y, float alpha, const float* x, int64_t n);

// ---- one-byte codes with a per-row scale (int8 / fp8 compression, row_codes.h) ----
// Packs m[n, c] into wire (row_code_bytes(n, c) bytes, zero-padded to a whole
// 32-bit word), and back: out[n, c] = decode(code) * scale.
void encode_scaled_rows(const float* m, float* wire, int64_t n, int64_t c, RowCode code);
void decode_scaled_rows(const float* wire, float* out, int64_t n, int64_t c, RowCode code);
// Sign bits with a per-row scale (sign_code_bytes), and back: out = +-scale.
void encode_signs(const float* m, float* wire, int64_t n, int64_t c);
void decode_signs(const float* wire, float* out, int64_t n, int64_t c);
// The k largest-magnitude entries of each row (topk_code_bytes), and back: the
// kept entries in zeros. (Decoding skips an index outside the row.)
void encode_topk(const float* m, float* wire, int64_t n, int64_t c, int64_t k, bool bitmap);
void decode_topk(const float* wire, float* out, int64_t n, int64_t c, int64_t k, bool bitmap);
// ---- block-scaled 3/4-bit codes (mxfp4, nvfp4, int4, int3: block_codes.h) ----------
// Packs m[n, c] into wire (block_wire_bytes(code, n, c) bytes, zero-padded to a
// whole 32-bit word), and back: out[n, c] = the codes' values (NaN where the
// encoder met a non-finite entry).
void encode_blocks(const float* m, float* wire, int64_t n, int64_t c, const BlockCoding& coding);
void decode_blocks(const float* wire, float* out, int64_t n, int64_t c, BlockCode code);
// ---- the randomized Hadamard rotation (hadamard.h) --------------------------------
// out[n, c] = each row's pieces rotated (inverse: rotated back); in may be out.
void rotate_rows(const float* in, float* out, int64_t n, int64_t c, int block, uint64_t key, bool inverse);
// Its simple twin for tests: the dense product from the definition in double (in != out).
void rotate_rows_reference(const float* in, float* out, int64_t n, int64_t c, int block, uint64_t key, bool inverse);

}  // namespace occ::kernels
