// The CPU backend: the reference kernels of kernels.h behind the Ops interface.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/cpu_gemm.h"
#include "kernels/ops.h"
#if defined(OCC_WITH_CUDA)
#include "kernels/cuda/cuda_ops.h"
#endif

namespace occ::kernels {

namespace {

class CpuOps final : public Ops {
 public:
  Device device() const override { return Device::Cpu; }
  void synchronize() override {}
  // fp32 storage, rounded by the step: the reference numerics.
  Precision storage_format(Precision) const override { return Precision::Fp32; }

  // The step's tensors are fp32 here; 16-bit buffers are wires (core/wire_format.h):
  // packing rounds to the format (nearest, ties to even), unpacking widens exactly.
  void copy(TensorRef dst, ConstTensorRef src, int64_t n) override {
    if (n <= 0 || dst.data() == src.data()) return;
    if (dst.format() == src.format()) {
      // In pieces over the threads: --bf16 refreshes its 16-bit copy of every
      // weight this way each step (500 MB at GPT-2 small), one thread's memcpy
      // leaves half the memory bandwidth unused.
      const size_t bytes = element_bytes(src.format()) * size_t(n), piece = size_t(1) << 20;
      char* d = static_cast<char*>(dst.data());
      const char* x = static_cast<const char*>(src.data());
      const int64_t pieces = int64_t((bytes + piece - 1) / piece);
#pragma omp parallel for schedule(static) if (pieces > 4)
      for (int64_t i = 0; i < pieces; ++i) {
        const size_t at = size_t(i) * piece;
        std::memcpy(d + at, x + at, std::min(piece, bytes - at));
      }
    } else if (src.is_fp32()) {
      const float* x = src.f32();
      uint16_t* y = static_cast<uint16_t*>(dst.data());
      for (int64_t i = 0; i < n; ++i) y[i] = sixteen_bits(dst.format(), x[i]);
    } else if (dst.is_fp32()) {
      const uint16_t* x = static_cast<const uint16_t*>(src.data());
      float* y = dst.f32();
      for (int64_t i = 0; i < n; ++i) y[i] = sixteen_value(src.format(), x[i]);
    } else {
      fail("internal: a copy from {} to {} values", precision_name(src.format()), precision_name(dst.format()));
    }
  }
  void fill(TensorRef dst, float value, int64_t n) override {
    float* x = dst.f32();
    for (int64_t i = 0; i < n; ++i) x[i] = value;
  }
  void round_to_precision(float* x, int64_t n, Precision p) override {
    if (p == Precision::Fp32) return;
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) x[i] = round_to(p, x[i]);
  }
  void upload_tokens(int32_t* dst, const int32_t* src, int64_t n) override {
    if (n > 0) std::memcpy(dst, src, sizeof(int32_t) * size_t(n));
  }

  // bf16 operands multiply in bf16 with fp32 accumulation where the CPU can (cpu_gemm.h);
  // OCC_CPU_GEMM=openblas keeps fp32 products, the reference numerics.
  void linear_forward(TensorRef out, ConstTensorRef inp, ConstTensorRef w, ConstTensorRef bias, int64_t N, int64_t C,
                      int64_t OC, Precision operands) override {
    kernels::linear_forward(out.f32(), inp.f32(), w.f32(), bias.f32(), N, C, OC, operands);
  }
  void linear_backward(TensorRef dinp, float* dw, float* dbias, ConstTensorRef dout, ConstTensorRef inp,
                       ConstTensorRef w, int64_t N, int64_t C, int64_t OC, bool accumulate_dinp,
                       Precision operands) override {
    kernels::linear_backward(dinp.f32(), dw, dbias, dout.f32(), inp.f32(), w.f32(), N, C, OC, accumulate_dinp,
                             operands);
  }
  void linear_gelu_forward(TensorRef pre, TensorRef out, ConstTensorRef inp, ConstTensorRef w, ConstTensorRef bias,
                           int64_t N, int64_t C, int64_t OC, Precision p) override {
    float* y = pre.f32();
    kernels::linear_forward(y, inp.f32(), w.f32(), bias.f32(), N, C, OC, p);
    kernels::gelu_forward(out.f32(), y, N * OC);  // GeLU of the unrounded sum
    round_to_precision(y, N * OC, p);
    round_to_precision(out.f32(), N * OC, p);
  }
  void linear_backward_gelu(TensorRef dpre, float* dpre_bias, float* dw, ConstTensorRef dout, ConstTensorRef gelu_out,
                            ConstTensorRef pre, ConstTensorRef w, int64_t N, int64_t C, int64_t OC,
                            Precision p) override {
    float* g = dpre.f32();
    kernels::linear_backward(g, dw, nullptr, dout.f32(), gelu_out.f32(), w.f32(), N, C, OC, false, p);
    kernels::gelu_backward(g, pre.f32(), g, N * C);
    if (dpre_bias) kernels::add_column_sums(dpre_bias, g, N, C);  // of the unrounded gradient
    round_to_precision(g, N * C, p);
  }
  void layernorm_forward(TensorRef out, float* mean, float* rstd, ConstTensorRef inp, ConstTensorRef w,
                         ConstTensorRef b, int64_t N, int64_t C, float eps) override {
    kernels::layernorm_forward(out.f32(), mean, rstd, inp.f32(), w.f32(), b.f32(), N, C, eps);
  }
  void layernorm_backward(TensorRef dinp, float* dw, float* db, ConstTensorRef dout, ConstTensorRef inp,
                          ConstTensorRef w, const float* mean, const float* rstd, int64_t N, int64_t C) override {
    kernels::layernorm_backward(dinp.f32(), dw, db, dout.f32(), inp.f32(), w.f32(), mean, rstd, N, C);
  }
  // The fused pairs are the separate kernels with the model's rounding between them.
  void bias_dropout_add_layernorm_forward(TensorRef residual_out, TensorRef ln_out, float* mean, float* rstd,
                                          ConstTensorRef residual, ConstTensorRef x, ConstTensorRef bias,
                                          const Dropout& d, ConstTensorRef w, ConstTensorRef b, int64_t N, int64_t T,
                                          int64_t C, float eps, Precision p) override {
    kernels::bias_dropout_add_forward(residual_out.f32(), residual.f32(), x.f32(), bias.f32(), d, N, T, C);
    round_to_precision(residual_out.f32(), N * C, p);
    kernels::layernorm_forward(ln_out.f32(), mean, rstd, residual_out.f32(), w.f32(), b.f32(), N, C, eps);
    round_to_precision(ln_out.f32(), N * C, p);
  }
  void layernorm_dropout_backward(TensorRef dresid, TensorRef dx, float* dbias, float* dw, float* db,
                                  ConstTensorRef dout, ConstTensorRef inp, ConstTensorRef w, const float* mean,
                                  const float* rstd, const Dropout& d, int64_t N, int64_t T, int64_t C,
                                  Precision p) override {
    kernels::layernorm_backward(dresid.f32(), dw, db, dout.f32(), inp.f32(), w.f32(), mean, rstd, N, C);
    round_to_precision(dresid.f32(), N * C, p);
    kernels::bias_dropout_add_backward(dx.f32(), dbias, dresid.f32(), d, N, T, C);
    round_to_precision(dx.f32(), N * C, p);
  }
  void rmsnorm_forward(TensorRef out, float* rstd, ConstTensorRef inp, ConstTensorRef w, int64_t N, int64_t C,
                       float eps) override {
    kernels::rmsnorm_forward(out.f32(), rstd, inp.f32(), w.f32(), N, C, eps);
  }
  void rmsnorm_backward(TensorRef dinp, float* dw, ConstTensorRef dout, ConstTensorRef inp, ConstTensorRef w,
                        const float* rstd, int64_t N, int64_t C) override {
    kernels::rmsnorm_backward(dinp.f32(), dw, dout.f32(), inp.f32(), w.f32(), rstd, N, C);
  }
  void bias_dropout_add_rmsnorm_forward(TensorRef residual_out, TensorRef norm_out, float* rstd,
                                        ConstTensorRef residual, ConstTensorRef x, ConstTensorRef bias,
                                        const Dropout& d, ConstTensorRef w, int64_t N, int64_t T, int64_t C, float eps,
                                        Precision p) override {
    kernels::bias_dropout_add_forward(residual_out.f32(), residual.f32(), x.f32(), bias.f32(), d, N, T, C);
    round_to_precision(residual_out.f32(), N * C, p);
    kernels::rmsnorm_forward(norm_out.f32(), rstd, residual_out.f32(), w.f32(), N, C, eps);
    round_to_precision(norm_out.f32(), N * C, p);
  }
  void rmsnorm_dropout_backward(TensorRef dresid, TensorRef dx, float* dbias, float* dw, ConstTensorRef dout,
                                ConstTensorRef inp, ConstTensorRef w, const float* rstd, const Dropout& d, int64_t N,
                                int64_t T, int64_t C, Precision p) override {
    kernels::rmsnorm_backward(dresid.f32(), dw, dout.f32(), inp.f32(), w.f32(), rstd, N, C);
    round_to_precision(dresid.f32(), N * C, p);
    kernels::bias_dropout_add_backward(dx.f32(), dbias, dresid.f32(), d, N, T, C);
    round_to_precision(dx.f32(), N * C, p);
  }
  void swiglu_forward(TensorRef out, ConstTensorRef inp, int64_t N, int64_t F) override {
    kernels::swiglu_forward(out.f32(), inp.f32(), N, F);
  }
  void swiglu_backward(TensorRef dinp, ConstTensorRef inp, ConstTensorRef dout, int64_t N, int64_t F) override {
    kernels::swiglu_backward(dinp.f32(), inp.f32(), dout.f32(), N, F);
  }
  void linear_swiglu_forward(TensorRef pre, TensorRef out, ConstTensorRef inp, ConstTensorRef w, ConstTensorRef bias,
                             int64_t N, int64_t C, int64_t F, Precision p) override {
    kernels::linear_forward(pre.f32(), inp.f32(), w.f32(), bias.f32(), N, C, 2 * F, p);
    round_to_precision(pre.f32(), N * 2 * F, p);
    kernels::swiglu_forward(out.f32(), pre.f32(), N, F);  // of the stored (rounded) pre
    round_to_precision(out.f32(), N * F, p);
  }
  void linear_backward_swiglu(TensorRef dpre, float* dpre_bias, float* dw, ConstTensorRef dout, ConstTensorRef act,
                              ConstTensorRef pre, ConstTensorRef w, int64_t N, int64_t F, int64_t OC,
                              Precision p) override {
    swiglu_grad_.resize(size_t(N * F));
    float* g = swiglu_grad_.data();
    kernels::linear_backward(g, dw, nullptr, dout.f32(), act.f32(), w.f32(), N, F, OC, false, p);
    kernels::swiglu_backward(dpre.f32(), pre.f32(), g, N, F);
    if (dpre_bias) kernels::add_column_sums(dpre_bias, dpre.f32(), N, 2 * F);  // of the unrounded gradient
    round_to_precision(dpre.f32(), N * 2 * F, p);
  }
  void gelu_forward(TensorRef out, ConstTensorRef inp, int64_t n) override {
    kernels::gelu_forward(out.f32(), inp.f32(), n);
  }
  void gelu_backward(TensorRef dinp, ConstTensorRef inp, ConstTensorRef dout, int64_t n) override {
    kernels::gelu_backward(dinp.f32(), inp.f32(), dout.f32(), n);
  }
  void bias_dropout_add_forward(TensorRef out, ConstTensorRef residual, ConstTensorRef x, ConstTensorRef bias,
                                const Dropout& d, int64_t N, int64_t T, int64_t C) override {
    kernels::bias_dropout_add_forward(out.f32(), residual.f32(), x.f32(), bias.f32(), d, N, T, C);
  }
  void bias_dropout_add_backward(TensorRef dx, float* dbias, ConstTensorRef dout, const Dropout& d, int64_t N,
                                 int64_t T, int64_t C) override {
    kernels::bias_dropout_add_backward(dx.f32(), dbias, dout.f32(), d, N, T, C);
  }
  void dropout_inplace(TensorRef x, const Dropout& d, int64_t N, int64_t T, int64_t C) override {
    kernels::dropout_inplace(x.f32(), d, N, T, C);
  }

  // Saved: probs [B, H, T, T], then (with dropout) probs after dropout.
  int64_t attention_saved_floats(const AttentionShape& s, const Dropout& d, Precision) const override {
    return s.B * s.H * s.T * s.T * (d.active() ? 2 : 1);
  }
  void attention_forward(TensorRef out, float* saved, ConstTensorRef qkv, const AttentionShape& s,
                         const Dropout& d) override {
    kernels::attention_forward(out.f32(), saved, d.active() ? saved + s.B * s.H * s.T * s.T : nullptr, qkv.f32(), s,
                               d);
  }
  void attention_backward(TensorRef dqkv, ConstTensorRef dout, ConstTensorRef qkv, ConstTensorRef /*out*/,
                          const float* saved, const AttentionShape& s, const Dropout& d) override {
    kernels::attention_backward(dqkv.f32(), dout.f32(), qkv.f32(), saved,
                                d.active() ? saved + s.B * s.H * s.T * s.T : nullptr, s, d);
  }
  void rope_forward(TensorRef qkv, const float* table, int64_t table_T, const AttentionShape& s,
                    int64_t rotary_dim) override {
    kernels::rope_forward(qkv.f32(), table, table_T, s, rotary_dim);
  }
  void rope_backward(TensorRef dqkv, const float* table, int64_t table_T, const AttentionShape& s,
                     int64_t rotary_dim) override {
    kernels::rope_backward(dqkv.f32(), table, table_T, s, rotary_dim);
  }
  std::string attention_description(Precision) const override {
    return "cpu (fp32 GEMMs, probabilities kept for backward)";
  }
  std::string gemm_description(Precision p) const override { return cpu_gemm_description(p); }

  void embedding_forward(TensorRef out, const int32_t* tokens, ConstTensorRef wte, int64_t v0, int64_t V, int64_t N,
                         int64_t C) override {
    kernels::embedding_forward(out.f32(), tokens, wte.f32(), v0, V, N, C);
  }
  void embedding_backward(float* dwte, ConstTensorRef dout, const int32_t* tokens, int64_t v0, int64_t V, int64_t N,
                          int64_t C) override {
    kernels::embedding_backward(dwte, dout.f32(), tokens, v0, V, N, C);
  }
  void position_forward(TensorRef out, ConstTensorRef wpe, int64_t N, int64_t T, int64_t C) override {
    kernels::position_forward(out.f32(), wpe.f32(), N, T, C);
  }
  void position_backward(float* dwpe, ConstTensorRef dout, int64_t N, int64_t T, int64_t C) override {
    kernels::position_backward(dwpe, dout.f32(), N, T, C);
  }

  void row_max(float* out, ConstTensorRef logits, int64_t N, int64_t V) override {
    kernels::row_max(out, logits.f32(), N, V);
  }
  void row_sum_exp(float* out, ConstTensorRef logits, const float* max, int64_t N, int64_t V) override {
    kernels::row_sum_exp(out, logits.f32(), max, N, V);
  }
  void target_logit(float* out, ConstTensorRef logits, const int32_t* labels, int64_t v0, int64_t N,
                    int64_t V) override {
    kernels::target_logit(out, logits.f32(), labels, v0, N, V);
  }
  void cross_entropy_backward_inplace(TensorRef logits, const float* max, const float* sum_exp, const int32_t* labels,
                                      int64_t v0, float scale, int64_t N, int64_t V) override {
    kernels::cross_entropy_backward_inplace(logits.f32(), max, sum_exp, labels, v0, scale, N, V);
  }
  void cross_entropy_loss_sum(double* loss_sum, const float* max, const float* sum_exp, const float* target,
                              int64_t N) override {
    double loss = 0.0;
    for (int64_t n = 0; n < N; ++n) loss += double(std::log(sum_exp[n]) + max[n] - target[n]);
    *loss_sum += loss;
  }
  void cross_entropy_fused(TensorRef logits, const int32_t* labels, float grad_scale, int64_t N, int64_t V,
                           double* loss_sum) override {
    *loss_sum += kernels::cross_entropy_fused(logits.f32(), labels, grad_scale, N, V);
  }
  double read_double(const double* device_value) override { return *device_value; }

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
  double sum_squares_spans(const float* base, const Span* spans, int64_t count) override {
    double s = 0.0;
    for (int64_t i = 0; i < count; ++i) s += sum_squares(base + spans[i].offset, spans[i].numel);
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
  void encode_blocks(const float* m, float* wire, int64_t n, int64_t c, const BlockCoding& coding) override {
    kernels::encode_blocks(m, wire, n, c, coding);
  }
  void decode_blocks(const float* wire, float* out, int64_t n, int64_t c, BlockCode code) override {
    kernels::decode_blocks(wire, out, n, c, code);
  }
  void rotate_rows(const float* in, float* out, int64_t n, int64_t c, int block, uint64_t key, bool inverse) override {
    kernels::rotate_rows(in, out, n, c, block, key, inverse);
  }
  void encode_adaptive(const float* m, float* wire, int64_t n, int64_t c, const AdaptiveCoding& coding) override {
    kernels::encode_adaptive(m, wire, n, c, coding);
  }
  void decode_adaptive(const float* wire, float* out, int64_t n, int64_t c, double high_fraction) override {
    kernels::decode_adaptive(wire, out, n, c, high_fraction);
  }
  void encode_topk2(const float* m, float* wire, int64_t n, double density) override {
    kernels::encode_topk2(m, wire, n, density);
  }
  void decode_topk2(const float* wire, float* out, int64_t n, double density) override {
    kernels::decode_topk2(wire, out, n, density);
  }

 private:
  std::vector<float> swiglu_grad_;  // linear_backward_swiglu's g = dout w
};

}  // namespace

Ops& cpu_ops() {
  static CpuOps ops;
  return ops;
}

void select_attention_backend(Device d, const std::string& name) {
  if (d == Device::Cpu) {
    if (name != "auto") fail("--attention-backend {} chooses among the GPU's attention kernels; the CPU has one", name);
    return;
  }
#if defined(OCC_WITH_CUDA)
  select_cuda_attention(parse_cuda_attention(name));
#else
  fail("--device cuda: this binary was built without the CUDA backend; use --device cpu");
#endif
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
