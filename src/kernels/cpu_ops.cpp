// The CPU backend: the reference kernels of kernels.h behind the Ops interface.
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/ops.h"

namespace occ::kernels {

namespace {

class CpuOps final : public Ops {
 public:
  Device device() const override { return Device::Cpu; }
  void synchronize() override {}

  void copy(float* dst, const float* src, int64_t n) override {
    if (n > 0 && dst != src) std::memcpy(dst, src, sizeof(float) * size_t(n));
  }
  void fill(float* dst, float value, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) dst[i] = value;
  }
  void round_to_precision(float* x, int64_t n, Precision p) override {
    if (p == Precision::Fp32) return;
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) x[i] = round_to(p, x[i]);
  }
  void upload_tokens(int32_t* dst, const int32_t* src, int64_t n) override {
    if (n > 0) std::memcpy(dst, src, sizeof(int32_t) * size_t(n));
  }

  // fp32 products of the operands whatever their format: the reference numerics.
  void linear_forward(float* out, const float* inp, const float* w, const float* bias, int64_t N, int64_t C,
                      int64_t OC, Precision /*operands*/) override {
    kernels::linear_forward(out, inp, w, bias, N, C, OC);
  }
  void linear_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp, const float* w,
                       int64_t N, int64_t C, int64_t OC, bool accumulate_dinp, Precision /*operands*/) override {
    kernels::linear_backward(dinp, dw, dbias, dout, inp, w, N, C, OC, accumulate_dinp);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                         int64_t N, int64_t C, float eps) override {
    kernels::layernorm_forward(out, mean, rstd, inp, w, b, N, C, eps);
  }
  void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                          const float* mean, const float* rstd, int64_t N, int64_t C) override {
    kernels::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  }
  void gelu_forward(float* out, const float* inp, int64_t n) override { kernels::gelu_forward(out, inp, n); }
  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) override {
    kernels::gelu_backward(dinp, inp, dout, n);
  }
  void bias_dropout_add_forward(float* out, const float* residual, const float* x, const float* bias,
                                const Dropout& d, int64_t N, int64_t T, int64_t C) override {
    kernels::bias_dropout_add_forward(out, residual, x, bias, d, N, T, C);
  }
  void bias_dropout_add_backward(float* dx, float* dbias, const float* dout, const Dropout& d, int64_t N, int64_t T,
                                 int64_t C) override {
    kernels::bias_dropout_add_backward(dx, dbias, dout, d, N, T, C);
  }
  void dropout_inplace(float* x, const Dropout& d, int64_t N, int64_t T, int64_t C) override {
    kernels::dropout_inplace(x, d, N, T, C);
  }

  // Saved: probs [B, H, T, T], then (with dropout) probs after dropout.
  int64_t attention_saved_floats(const AttentionShape& s, const Dropout& d) const override {
    return s.B * s.H * s.T * s.T * (d.active() ? 2 : 1);
  }
  void attention_forward(float* out, float* saved, const float* qkv, const AttentionShape& s,
                         const Dropout& d) override {
    kernels::attention_forward(out, saved, d.active() ? saved + s.B * s.H * s.T * s.T : nullptr, qkv, s, d);
  }
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* saved,
                          const AttentionShape& s, const Dropout& d) override {
    kernels::attention_backward(dqkv, dout, qkv, saved, d.active() ? saved + s.B * s.H * s.T * s.T : nullptr, s, d);
  }

  void embedding_forward(float* out, const int32_t* tokens, const float* wte, int64_t v0, int64_t V, int64_t N,
                         int64_t C) override {
    kernels::embedding_forward(out, tokens, wte, v0, V, N, C);
  }
  void embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int64_t v0, int64_t V, int64_t N,
                          int64_t C) override {
    kernels::embedding_backward(dwte, dout, tokens, v0, V, N, C);
  }
  void position_forward(float* out, const float* wpe, int64_t N, int64_t T, int64_t C) override {
    kernels::position_forward(out, wpe, N, T, C);
  }
  void position_backward(float* dwpe, const float* dout, int64_t N, int64_t T, int64_t C) override {
    kernels::position_backward(dwpe, dout, N, T, C);
  }

  void row_max(float* out, const float* logits, int64_t N, int64_t V) override { kernels::row_max(out, logits, N, V); }
  void row_sum_exp(float* out, const float* logits, const float* max, int64_t N, int64_t V) override {
    kernels::row_sum_exp(out, logits, max, N, V);
  }
  void target_logit(float* out, const float* logits, const int32_t* labels, int64_t v0, int64_t N,
                    int64_t V) override {
    kernels::target_logit(out, logits, labels, v0, N, V);
  }
  void cross_entropy_backward_inplace(float* logits, const float* max, const float* sum_exp, const int32_t* labels,
                                      int64_t v0, float scale, int64_t N, int64_t V) override {
    kernels::cross_entropy_backward_inplace(logits, max, sum_exp, labels, v0, scale, N, V);
  }
  double cross_entropy_loss_sum(const float* max, const float* sum_exp, const float* target, int64_t N) override {
    double loss = 0.0;
    for (int64_t n = 0; n < N; ++n) loss += double(std::log(sum_exp[n]) + max[n] - target[n]);
    return loss;
  }
  double cross_entropy_fused(float* logits, const int32_t* labels, float grad_scale, int64_t N, int64_t V) override {
    return kernels::cross_entropy_fused(logits, labels, grad_scale, N, V);
  }

  void adamw_update(float* params, const float* grads, float* m, float* v, const uint8_t* decay, int64_t n,
                    const AdamWStep& s) override {
    const float b1 = s.beta1, b2 = s.beta2, eps = s.eps, wd = s.weight_decay, lr = s.lr;
    const float c1 = s.bias_correction1, c2 = s.bias_correction2;
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const float g = grads[i];
      m[i] = b1 * m[i] + (1.0f - b1) * g;
      v[i] = b2 * v[i] + (1.0f - b2) * g * g;
      const float update = (m[i] * c1) / (std::sqrt(v[i] * c2) + eps);
      // Decoupled weight decay (AdamW), as torch.optim.AdamW: p *= 1 - lr*wd.
      const float p = decay[i] ? params[i] * (1.0f - lr * wd) : params[i];
      params[i] = p - lr * update;
    }
  }
  double sum_squares(const float* x, int64_t n) override {
    double s = 0.0;
#pragma omp parallel for simd reduction(+ : s) schedule(static)
    for (int64_t i = 0; i < n; ++i) s += double(x[i]) * double(x[i]);
    return s;
  }
  void scale(float* x, float factor, int64_t n) override {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) x[i] *= factor;
  }
  void matmul(float* c, const float* a, const float* b, int64_t M, int64_t N, int64_t K, bool trans_a,
              bool trans_b) override {
    kernels::matmul(c, a, b, M, N, K, trans_a, trans_b);
  }
  void orthonormalize_columns(float* a, int64_t n, int64_t k) override { kernels::orthonormalize_columns(a, n, k); }
  void axpy(float* y, float alpha, const float* x, int64_t n) override { kernels::axpy(y, alpha, x, n); }
  void encode_scaled_rows(const float* m, float* wire, int64_t n, int64_t c, RowCode code) override {
    kernels::encode_scaled_rows(m, wire, n, c, code);
  }
  void decode_scaled_rows(const float* wire, float* out, int64_t n, int64_t c, RowCode code) override {
    kernels::decode_scaled_rows(wire, out, n, c, code);
  }
  void encode_signs(const float* m, float* wire, int64_t n, int64_t c) override { kernels::encode_signs(m, wire, n, c); }
  void decode_signs(const float* wire, float* out, int64_t n, int64_t c) override {
    kernels::decode_signs(wire, out, n, c);
  }
  void encode_topk(const float* m, float* wire, int64_t n, int64_t c, int64_t k, bool bitmap) override {
    kernels::encode_topk(m, wire, n, c, k, bitmap);
  }
  void decode_topk(const float* wire, float* out, int64_t n, int64_t c, int64_t k, bool bitmap) override {
    kernels::decode_topk(wire, out, n, c, k, bitmap);
  }
};

}  // namespace

Ops& cpu_ops() {
  static CpuOps ops;
  return ops;
}

Ops& ops_for(Device d) {
  if (d == Device::Cpu) return cpu_ops();
  require_device(d);
#if defined(OCC_WITH_CUDA)
  return cuda_ops();
#else
  fail("--device cuda: this binary was built without the CUDA backend; use --device cpu");
#endif
}

}  // namespace occ::kernels
