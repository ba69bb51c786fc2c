#include "model/block.h"

namespace occ {

BlockShape BlockShape::of(const GptConfig& cfg, int tp_size) {
  BlockShape s;
  s.norm = cfg.normalization;
  s.eps = cfg.norm_epsilon;
  s.swiglu = cfg.swiglu;
  s.rope = cfg.position_embedding == PositionEmbedding::Rope;
  s.C = cfg.hidden_size;
  s.heads = cfg.num_attention_heads / tp_size;
  s.groups = cfg.kv_heads() / tp_size;
  s.D = cfg.head_dim();
  s.qkv = cfg.qkv_size() / tp_size;
  s.attn = s.heads * s.D;
  s.ffn = cfg.ffn_hidden_size() / tp_size;
  s.fc = cfg.mlp_fc_size() / tp_size;
  s.rotary_dim = s.rope ? cfg.rotary_dim() : 0;
  return s;
}

void BlockOps::norm_forward(TensorRef out, NormStats st, ConstTensorRef inp, ConstTensorRef w, ConstTensorRef b,
                            int64_t N) {
  if (s_.layernorm())
    ops_.layernorm_forward(out, st.mean, st.rstd, inp, w, b, N, s_.C, s_.eps);
  else
    ops_.rmsnorm_forward(out, st.rstd, inp, w, N, s_.C, s_.eps);
}

void BlockOps::norm_backward(TensorRef dinp, float* dw, float* db, ConstTensorRef dout, ConstTensorRef inp,
                             ConstTensorRef w, NormStats st, int64_t N) {
  if (s_.layernorm())
    ops_.layernorm_backward(dinp, dw, db, dout, inp, w, st.mean, st.rstd, N, s_.C);
  else
    ops_.rmsnorm_backward(dinp, dw, dout, inp, w, st.rstd, N, s_.C);
}

void BlockOps::add_norm_forward(TensorRef residual_out, TensorRef norm_out, NormStats st, ConstTensorRef residual,
                                ConstTensorRef x, ConstTensorRef bias, const kernels::Dropout& d, ConstTensorRef w,
                                ConstTensorRef b, int64_t N, int64_t T, Precision p) {
  if (s_.layernorm())
    ops_.bias_dropout_add_layernorm_forward(residual_out, norm_out, st.mean, st.rstd, residual, x, bias, d, w, b, N, T,
                                            s_.C, s_.eps, p);
  else
    ops_.bias_dropout_add_rmsnorm_forward(residual_out, norm_out, st.rstd, residual, x, bias, d, w, N, T, s_.C, s_.eps,
                                          p);
}

void BlockOps::norm_dropout_backward(TensorRef dresid, TensorRef dx, float* dbias, float* dw, float* db,
                                     ConstTensorRef dout, ConstTensorRef inp, ConstTensorRef w, NormStats st,
                                     const kernels::Dropout& d, int64_t N, int64_t T, Precision p) {
  if (s_.layernorm())
    ops_.layernorm_dropout_backward(dresid, dx, dbias, dw, db, dout, inp, w, st.mean, st.rstd, d, N, T, s_.C, p);
  else
    ops_.rmsnorm_dropout_backward(dresid, dx, dbias, dw, dout, inp, w, st.rstd, d, N, T, s_.C, p);
}

void BlockOps::mlp_in_forward(TensorRef fc, TensorRef act, ConstTensorRef inp, ConstTensorRef w, ConstTensorRef b,
                              int64_t N, Precision p) {
  if (s_.swiglu)
    ops_.linear_swiglu_forward(fc, act, inp, w, b, N, s_.C, s_.ffn, p);
  else
    ops_.linear_gelu_forward(fc, act, inp, w, b, N, s_.C, s_.ffn, p);
}

void BlockOps::mlp_out_backward(TensorRef dfc, float* dfc_bias, float* dw_out, ConstTensorRef dout,
                                ConstTensorRef act, ConstTensorRef fc, ConstTensorRef w_out, int64_t N, Precision p) {
  if (s_.swiglu)
    ops_.linear_backward_swiglu(dfc, dfc_bias, dw_out, dout, act, fc, w_out, N, s_.ffn, s_.C, p);
  else
    ops_.linear_backward_gelu(dfc, dfc_bias, dw_out, dout, act, fc, w_out, N, s_.ffn, s_.C, p);
}

}  // namespace occ
