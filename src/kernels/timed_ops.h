#pragma once
// A profiling decorator over any Ops backend: every call waits for the device
// before and after (Ops::synchronize) and adds its wall time to a per-op
// account, so that `bench --op-profile` can say where a step goes on the GPU
// as on the CPU without an external profiler. The waits serialise the device
// and add a few microseconds per call: the shares are what it is for, not the
// absolute step time. Linear layers are accounted per shape, with their FLOPs.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kernels/ops.h"

namespace occ::kernels {

struct OpAccount {
  std::string name;
  int64_t calls = 0;
  double seconds = 0.0;
  double flops = 0.0;  // matrix FLOPs (linear layers only)
};

class TimedOps final : public Ops {
 public:
  explicit TimedOps(Ops& inner) : inner_(inner) {}

  // Off: calls pass straight through, with no waits (untimed steps run at full speed).
  void set_enabled(bool on) { enabled_ = on; }

  // The accounts so far, largest total time first.
  std::vector<OpAccount> accounts() const;
  double total_seconds() const;
  void reset() { accounts_.clear(); }

  Device device() const override { return inner_.device(); }
  void synchronize() override { inner_.synchronize(); }

  Precision storage_format(Precision step) const override { return inner_.storage_format(step); }
  void copy(TensorRef dst, ConstTensorRef src, int64_t n) override;
  void fill(TensorRef dst, float value, int64_t n) override;
  void round_to_precision(float* x, int64_t n, Precision p) override;
  void upload_tokens(int32_t* dst, const int32_t* host_src, int64_t n) override;
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
  int64_t attention_saved_floats(const AttentionShape& s, const Dropout& d, Precision storage) const override {
    return inner_.attention_saved_floats(s, d, storage);
  }
  void attention_forward(TensorRef out, float* saved, ConstTensorRef qkv, const AttentionShape& s,
                         const Dropout& d) override;
  void attention_backward(TensorRef dqkv, ConstTensorRef dout, ConstTensorRef qkv, ConstTensorRef out,
                          const float* saved, const AttentionShape& s, const Dropout& d) override;
  std::string attention_description(Precision p) const override { return inner_.attention_description(p); }
  std::string gemm_description(Precision p) const override { return inner_.gemm_description(p); }
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

 private:
  // Times one call of f under `name`.
  template <class F>
  auto timed(const std::string& name, double flops, F&& f);

  Ops& inner_;
  bool enabled_ = true;
  std::map<std::string, OpAccount> accounts_;
};

}  // namespace occ::kernels
