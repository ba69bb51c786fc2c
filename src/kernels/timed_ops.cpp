#include "kernels/timed_ops.h"

#include <algorithm>
#include <chrono>
#include <type_traits>

namespace occ::kernels {

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::string shape(int64_t N, int64_t C, int64_t OC) {
  return " [" + std::to_string(N) + " x " + std::to_string(C) + "] -> " + std::to_string(OC);
}

}  // namespace

template <class F>
auto TimedOps::timed(const std::string& name, double flops, F&& f) {
  if (!enabled_) return f();
  inner_.synchronize();
  const double t0 = now();
  auto add = [&]() {
    inner_.synchronize();
    OpAccount& a = accounts_[name];
    a.name = name;
    a.calls += 1;
    a.seconds += now() - t0;
    a.flops += flops;
  };
  if constexpr (std::is_void_v<decltype(f())>) {
    f();
    add();
  } else {
    auto result = f();
    add();
    return result;
  }
}

std::vector<OpAccount> TimedOps::accounts() const {
  std::vector<OpAccount> out;
  for (const auto& [name, a] : accounts_) out.push_back(a);
  std::sort(out.begin(), out.end(), [](const OpAccount& a, const OpAccount& b) { return a.seconds > b.seconds; });
  return out;
}

double TimedOps::total_seconds() const {
  double s = 0.0;
  for (const auto& [name, a] : accounts_) s += a.seconds;
  return s;
}

void TimedOps::copy(TensorRef dst, ConstTensorRef src, int64_t n) {
  timed("copy", 0, [&] { inner_.copy(dst, src, n); });
}
void TimedOps::fill(TensorRef dst, float value, int64_t n) {
  timed("fill", 0, [&] { inner_.fill(dst, value, n); });
}
void TimedOps::round_to_precision(float* x, int64_t n, Precision p) {
  timed("round_to_precision", 0, [&] { inner_.round_to_precision(x, n, p); });
}
void TimedOps::upload_tokens(int32_t* dst, const int32_t* host_src, int64_t n) {
  timed("upload_tokens", 0, [&] { inner_.upload_tokens(dst, host_src, n); });
}
void TimedOps::linear_forward(TensorRef out, ConstTensorRef inp, ConstTensorRef w, ConstTensorRef bias, int64_t N,
                              int64_t C, int64_t OC, Precision operands) {
  timed("linear_forward" + shape(N, C, OC), 2.0 * double(N) * double(C) * double(OC),
        [&] { inner_.linear_forward(out, inp, w, bias, N, C, OC, operands); });
}
void TimedOps::linear_backward(TensorRef dinp, float* dw, float* dbias, ConstTensorRef dout, ConstTensorRef inp,
                               ConstTensorRef w, int64_t N, int64_t C, int64_t OC, bool accumulate_dinp,
                               Precision operands) {
  const double gemms = double(bool(dinp)) + double(dw != nullptr);
  timed("linear_backward" + shape(N, C, OC), gemms * 2.0 * double(N) * double(C) * double(OC),
        [&] { inner_.linear_backward(dinp, dw, dbias, dout, inp, w, N, C, OC, accumulate_dinp, operands); });
}
void TimedOps::linear_gelu_forward(TensorRef pre, TensorRef out, ConstTensorRef inp, ConstTensorRef w,
                                   ConstTensorRef bias, int64_t N, int64_t C, int64_t OC, Precision p) {
  timed("linear_gelu_forward" + shape(N, C, OC), 2.0 * double(N) * double(C) * double(OC),
        [&] { inner_.linear_gelu_forward(pre, out, inp, w, bias, N, C, OC, p); });
}
void TimedOps::linear_backward_gelu(TensorRef dpre, float* dpre_bias, float* dw, ConstTensorRef dout,
                                    ConstTensorRef gelu_out, ConstTensorRef pre, ConstTensorRef w, int64_t N, int64_t C,
                                    int64_t OC, Precision p) {
  const double gemms = double(bool(dpre)) + double(dw != nullptr);
  timed("linear_backward_gelu" + shape(N, C, OC), gemms * 2.0 * double(N) * double(C) * double(OC),
        [&] { inner_.linear_backward_gelu(dpre, dpre_bias, dw, dout, gelu_out, pre, w, N, C, OC, p); });
}
void TimedOps::layernorm_forward(TensorRef out, float* mean, float* rstd, ConstTensorRef inp, ConstTensorRef w,
                                 ConstTensorRef b, int64_t N, int64_t C, float eps) {
  timed("layernorm_forward", 0, [&] { inner_.layernorm_forward(out, mean, rstd, inp, w, b, N, C, eps); });
}
void TimedOps::layernorm_backward(TensorRef dinp, float* dw, float* db, ConstTensorRef dout, ConstTensorRef inp,
                                  ConstTensorRef w, const float* mean, const float* rstd, int64_t N, int64_t C) {
  timed("layernorm_backward", 0, [&] { inner_.layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C); });
}
void TimedOps::bias_dropout_add_layernorm_forward(TensorRef residual_out, TensorRef ln_out, float* mean, float* rstd,
                                                  ConstTensorRef residual, ConstTensorRef x, ConstTensorRef bias,
                                                  const Dropout& d, ConstTensorRef w, ConstTensorRef b, int64_t N,
                                                  int64_t T, int64_t C, float eps, Precision p) {
  timed("bias_dropout_add_layernorm_forward", 0, [&] {
    inner_.bias_dropout_add_layernorm_forward(residual_out, ln_out, mean, rstd, residual, x, bias, d, w, b, N, T, C,
                                              eps, p);
  });
}
void TimedOps::layernorm_dropout_backward(TensorRef dresid, TensorRef dx, float* dbias, float* dw, float* db,
                                          ConstTensorRef dout, ConstTensorRef inp, ConstTensorRef w,
                                          const float* mean, const float* rstd, const Dropout& d, int64_t N,
                                          int64_t T, int64_t C, Precision p) {
  timed("layernorm_dropout_backward", 0, [&] {
    inner_.layernorm_dropout_backward(dresid, dx, dbias, dw, db, dout, inp, w, mean, rstd, d, N, T, C, p);
  });
}
void TimedOps::rmsnorm_forward(TensorRef out, float* rstd, ConstTensorRef inp, ConstTensorRef w, int64_t N, int64_t C,
                               float eps) {
  timed("rmsnorm_forward", 0, [&] { inner_.rmsnorm_forward(out, rstd, inp, w, N, C, eps); });
}
void TimedOps::rmsnorm_backward(TensorRef dinp, float* dw, ConstTensorRef dout, ConstTensorRef inp, ConstTensorRef w,
                                const float* rstd, int64_t N, int64_t C) {
  timed("rmsnorm_backward", 0, [&] { inner_.rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C); });
}
void TimedOps::bias_dropout_add_rmsnorm_forward(TensorRef residual_out, TensorRef norm_out, float* rstd,
                                                ConstTensorRef residual, ConstTensorRef x, ConstTensorRef bias,
                                                const Dropout& d, ConstTensorRef w, int64_t N, int64_t T, int64_t C,
                                                float eps, Precision p) {
  timed("bias_dropout_add_rmsnorm_forward", 0, [&] {
    inner_.bias_dropout_add_rmsnorm_forward(residual_out, norm_out, rstd, residual, x, bias, d, w, N, T, C, eps, p);
  });
}
void TimedOps::rmsnorm_dropout_backward(TensorRef dresid, TensorRef dx, float* dbias, float* dw, ConstTensorRef dout,
                                        ConstTensorRef inp, ConstTensorRef w, const float* rstd, const Dropout& d,
                                        int64_t N, int64_t T, int64_t C, Precision p) {
  timed("rmsnorm_dropout_backward", 0,
        [&] { inner_.rmsnorm_dropout_backward(dresid, dx, dbias, dw, dout, inp, w, rstd, d, N, T, C, p); });
}
void TimedOps::swiglu_forward(TensorRef out, ConstTensorRef inp, int64_t N, int64_t F) {
  timed("swiglu_forward", 0, [&] { inner_.swiglu_forward(out, inp, N, F); });
}
void TimedOps::swiglu_backward(TensorRef dinp, ConstTensorRef inp, ConstTensorRef dout, int64_t N, int64_t F) {
  timed("swiglu_backward", 0, [&] { inner_.swiglu_backward(dinp, inp, dout, N, F); });
}
void TimedOps::linear_swiglu_forward(TensorRef pre, TensorRef out, ConstTensorRef inp, ConstTensorRef w,
                                     ConstTensorRef bias, int64_t N, int64_t C, int64_t F, Precision p) {
  timed("linear_swiglu_forward" + shape(N, C, 2 * F), 2.0 * double(N) * double(C) * double(2 * F),
        [&] { inner_.linear_swiglu_forward(pre, out, inp, w, bias, N, C, F, p); });
}
void TimedOps::linear_backward_swiglu(TensorRef dpre, float* dpre_bias, float* dw, ConstTensorRef dout,
                                      ConstTensorRef act, ConstTensorRef pre, ConstTensorRef w, int64_t N, int64_t F,
                                      int64_t OC, Precision p) {
  const double gemms = double(bool(dpre)) + double(dw != nullptr);
  timed("linear_backward_swiglu" + shape(N, F, OC), gemms * 2.0 * double(N) * double(F) * double(OC),
        [&] { inner_.linear_backward_swiglu(dpre, dpre_bias, dw, dout, act, pre, w, N, F, OC, p); });
}
void TimedOps::rope_forward(TensorRef qkv, const float* table, int64_t table_T, const AttentionShape& s,
                            int64_t rotary_dim) {
  timed("rope_forward", 0, [&] { inner_.rope_forward(qkv, table, table_T, s, rotary_dim); });
}
void TimedOps::rope_backward(TensorRef dqkv, const float* table, int64_t table_T, const AttentionShape& s,
                             int64_t rotary_dim) {
  timed("rope_backward", 0, [&] { inner_.rope_backward(dqkv, table, table_T, s, rotary_dim); });
}
void TimedOps::gelu_forward(TensorRef out, ConstTensorRef inp, int64_t n) {
  timed("gelu_forward", 0, [&] { inner_.gelu_forward(out, inp, n); });
}
void TimedOps::gelu_backward(TensorRef dinp, ConstTensorRef inp, ConstTensorRef dout, int64_t n) {
  timed("gelu_backward", 0, [&] { inner_.gelu_backward(dinp, inp, dout, n); });
}
void TimedOps::bias_dropout_add_forward(TensorRef out, ConstTensorRef residual, ConstTensorRef x, ConstTensorRef bias,
                                        const Dropout& d, int64_t N, int64_t T, int64_t C) {
  timed("bias_dropout_add_forward", 0, [&] { inner_.bias_dropout_add_forward(out, residual, x, bias, d, N, T, C); });
}
void TimedOps::bias_dropout_add_backward(TensorRef dx, float* dbias, ConstTensorRef dout, const Dropout& d, int64_t N,
                                         int64_t T, int64_t C) {
  timed("bias_dropout_add_backward", 0, [&] { inner_.bias_dropout_add_backward(dx, dbias, dout, d, N, T, C); });
}
void TimedOps::dropout_inplace(TensorRef x, const Dropout& d, int64_t N, int64_t T, int64_t C) {
  timed("dropout_inplace", 0, [&] { inner_.dropout_inplace(x, d, N, T, C); });
}
// Attention FLOPs count the causal half: QK^T and PV over the T (T + 1) / 2
// (query, key) pairs a causal kernel must compute (forward 2 products, backward 4).
static double causal_pairs(const AttentionShape& s) {
  return double(s.B) * double(s.H) * double(s.T) * double(s.T + 1) / 2.0 * double(s.D);
}
void TimedOps::attention_forward(TensorRef out, float* saved, ConstTensorRef qkv, const AttentionShape& s,
                                 const Dropout& d) {
  timed("attention_forward", 4.0 * causal_pairs(s), [&] { inner_.attention_forward(out, saved, qkv, s, d); });
}
void TimedOps::attention_backward(TensorRef dqkv, ConstTensorRef dout, ConstTensorRef qkv, ConstTensorRef out,
                                  const float* saved, const AttentionShape& s, const Dropout& d) {
  timed("attention_backward", 8.0 * causal_pairs(s),
        [&] { inner_.attention_backward(dqkv, dout, qkv, out, saved, s, d); });
}
void TimedOps::embedding_forward(TensorRef out, const int32_t* tokens, ConstTensorRef wte, int64_t v0, int64_t V,
                                 int64_t N, int64_t C) {
  timed("embedding_forward", 0, [&] { inner_.embedding_forward(out, tokens, wte, v0, V, N, C); });
}
void TimedOps::embedding_backward(float* dwte, ConstTensorRef dout, const int32_t* tokens, int64_t v0, int64_t V,
                                  int64_t N, int64_t C) {
  timed("embedding_backward", 0, [&] { inner_.embedding_backward(dwte, dout, tokens, v0, V, N, C); });
}
void TimedOps::position_forward(TensorRef out, ConstTensorRef wpe, int64_t N, int64_t T, int64_t C) {
  timed("position_forward", 0, [&] { inner_.position_forward(out, wpe, N, T, C); });
}
void TimedOps::position_backward(float* dwpe, ConstTensorRef dout, int64_t N, int64_t T, int64_t C) {
  timed("position_backward", 0, [&] { inner_.position_backward(dwpe, dout, N, T, C); });
}
void TimedOps::row_max(float* out, ConstTensorRef logits, int64_t N, int64_t V) {
  timed("row_max", 0, [&] { inner_.row_max(out, logits, N, V); });
}
void TimedOps::row_sum_exp(float* out, ConstTensorRef logits, const float* max, int64_t N, int64_t V) {
  timed("row_sum_exp", 0, [&] { inner_.row_sum_exp(out, logits, max, N, V); });
}
void TimedOps::target_logit(float* out, ConstTensorRef logits, const int32_t* labels, int64_t v0, int64_t N,
                            int64_t V) {
  timed("target_logit", 0, [&] { inner_.target_logit(out, logits, labels, v0, N, V); });
}
void TimedOps::cross_entropy_backward_inplace(TensorRef logits, const float* max, const float* sum_exp,
                                              const int32_t* labels, int64_t v0, float scale, int64_t N,
                                              int64_t V) {
  timed("cross_entropy_backward_inplace", 0,
        [&] { inner_.cross_entropy_backward_inplace(logits, max, sum_exp, labels, v0, scale, N, V); });
}
void TimedOps::cross_entropy_loss_sum(double* loss_sum, const float* max, const float* sum_exp, const float* target,
                                      int64_t N) {
  timed("cross_entropy_loss_sum", 0, [&] { inner_.cross_entropy_loss_sum(loss_sum, max, sum_exp, target, N); });
}
void TimedOps::cross_entropy_fused(TensorRef logits, const int32_t* labels, float grad_scale, int64_t N, int64_t V,
                                   double* loss_sum) {
  timed("cross_entropy_fused", 0, [&] { inner_.cross_entropy_fused(logits, labels, grad_scale, N, V, loss_sum); });
}
double TimedOps::read_double(const double* device_value) {
  return timed("read_double", 0, [&] { return inner_.read_double(device_value); });
}
void TimedOps::adamw_update(float* params, const float* grads, float* m, float* v, const uint8_t* decay, int64_t n,
                            const AdamWStep& step) {
  timed("adamw_update", 0, [&] { inner_.adamw_update(params, grads, m, v, decay, n, step); });
}
double TimedOps::sum_squares(const float* x, int64_t n) {
  return timed("sum_squares", 0, [&] { return inner_.sum_squares(x, n); });
}
double TimedOps::sum_squares_spans(const float* base, const Span* spans, int64_t count) {
  return timed("sum_squares_spans", 0, [&] { return inner_.sum_squares_spans(base, spans, count); });
}
void TimedOps::scale(float* x, float factor, int64_t n) {
  timed("scale", 0, [&] { inner_.scale(x, factor, n); });
}
void TimedOps::matmul(float* c, const float* a, const float* b, int64_t M, int64_t N, int64_t K, bool trans_a,
                      bool trans_b) {
  timed("matmul", 2.0 * double(M) * double(N) * double(K),
        [&] { inner_.matmul(c, a, b, M, N, K, trans_a, trans_b); });
}
void TimedOps::orthonormalize_columns(float* a, int64_t n, int64_t k) {
  timed("orthonormalize_columns", 0, [&] { inner_.orthonormalize_columns(a, n, k); });
}
void TimedOps::axpy(float* y, float alpha, const float* x, int64_t n) {
  timed("axpy", 0, [&] { inner_.axpy(y, alpha, x, n); });
}
void TimedOps::encode_scaled_rows(const float* m, float* wire, int64_t n, int64_t c, RowCode code) {
  timed("encode_scaled_rows", 0, [&] { inner_.encode_scaled_rows(m, wire, n, c, code); });
}
void TimedOps::decode_scaled_rows(const float* wire, float* out, int64_t n, int64_t c, RowCode code) {
  timed("decode_scaled_rows", 0, [&] { inner_.decode_scaled_rows(wire, out, n, c, code); });
}
void TimedOps::encode_signs(const float* m, float* wire, int64_t n, int64_t c) {
  timed("encode_signs", 0, [&] { inner_.encode_signs(m, wire, n, c); });
}
void TimedOps::decode_signs(const float* wire, float* out, int64_t n, int64_t c) {
  timed("decode_signs", 0, [&] { inner_.decode_signs(wire, out, n, c); });
}
void TimedOps::encode_topk(const float* m, float* wire, int64_t n, int64_t c, int64_t k, bool bitmap) {
  timed("encode_topk", 0, [&] { inner_.encode_topk(m, wire, n, c, k, bitmap); });
}
void TimedOps::decode_topk(const float* wire, float* out, int64_t n, int64_t c, int64_t k, bool bitmap) {
  timed("decode_topk", 0, [&] { inner_.decode_topk(wire, out, n, c, k, bitmap); });
}
void TimedOps::encode_blocks(const float* m, float* wire, int64_t n, int64_t c, const BlockCoding& coding) {
  timed("encode_blocks", 0, [&] { inner_.encode_blocks(m, wire, n, c, coding); });
}
void TimedOps::decode_blocks(const float* wire, float* out, int64_t n, int64_t c, BlockCode code) {
  timed("decode_blocks", 0, [&] { inner_.decode_blocks(wire, out, n, c, code); });
}
void TimedOps::rotate_rows(const float* in, float* out, int64_t n, int64_t c, int block, uint64_t key, bool inverse) {
  timed("rotate_rows", 0, [&] { inner_.rotate_rows(in, out, n, c, block, key, inverse); });
}
void TimedOps::encode_adaptive(const float* m, float* wire, int64_t n, int64_t c, const AdaptiveCoding& coding) {
  timed("encode_adaptive", 0, [&] { inner_.encode_adaptive(m, wire, n, c, coding); });
}
void TimedOps::decode_adaptive(const float* wire, float* out, int64_t n, int64_t c, double high_fraction) {
  timed("decode_adaptive", 0, [&] { inner_.decode_adaptive(wire, out, n, c, high_fraction); });
}
void TimedOps::encode_topk2(const float* m, float* wire, int64_t n, double density) {
  timed("encode_topk2", 0, [&] { inner_.encode_topk2(m, wire, n, density); });
}
void TimedOps::decode_topk2(const float* wire, float* out, int64_t n, double density) {
  timed("decode_topk2", 0, [&] { inner_.decode_topk2(wire, out, n, density); });
}

}  // namespace occ::kernels
