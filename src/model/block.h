#pragma once
// One transformer layer as this rank computes it: its sizes (the tensor-
// parallel shard's) and the variants GptConfig's architecture flags choose
// (normalisation LayerNorm | RMSNorm, the MLP's GeLU | SwiGLU, learned
// positions | RoPE, biases or none), and the dispatch of the variant parts to
// the backend. GptStage's layer forward and backward read their sizes here
// and call these helpers where a variant picks the kernel, so a new variant
// is a branch here rather than one at every place a layer uses the part.
#include <cstdint>

#include "kernels/ops.h"
#include "model/config.h"

namespace occ {

struct BlockShape {
  Normalization norm = Normalization::LayerNorm;
  float eps = 1e-5f;
  bool swiglu = false, rope = false;
  int64_t C = 0;                           // hidden size: the residual stream's width
  int64_t heads = 0, groups = 0, D = 0;    // this rank's query heads and k/v heads, the head size
  int64_t qkv = 0;                         // this rank's QKV width: (heads + 2 groups) D
  int64_t attn = 0;                        // attention's output width: heads D
  int64_t ffn = 0;                         // this rank's MLP inner width (the activation's output)
  int64_t fc = 0;                          // the MLP's first output: ffn, or [gate | up] 2 ffn with SwiGLU
  int64_t rotary_dim = 0;                  // RoPE: features of each head rotated

  static BlockShape of(const GptConfig& cfg, int tp_size);
  bool layernorm() const { return norm == Normalization::LayerNorm; }
};

// A norm's per-row statistics: the mean (LayerNorm only) and the reciprocal
// standard deviation (LayerNorm) or root mean square (RMSNorm).
struct NormStats {
  float* mean = nullptr;
  float* rstd = nullptr;
};

class BlockOps {
 public:
  BlockOps(kernels::Ops& ops, const BlockShape& shape) : ops_(ops), s_(shape) {}
  const BlockShape& shape() const { return s_; }

  // ---- normalisation over [N, C] (b: LayerNorm's bias, null with RMSNorm) ----
  void norm_forward(TensorRef out, NormStats st, ConstTensorRef inp, ConstTensorRef w, ConstTensorRef b, int64_t N);
  // dinp +=; dw, db (fp32) +=.
  void norm_backward(TensorRef dinp, float* dw, float* db, ConstTensorRef dout, ConstTensorRef inp, ConstTensorRef w,
                     NormStats st, int64_t N);
  // residual_out = residual + dropout(x + bias), norm_out = its norm (ops.h's fused pair).
  void add_norm_forward(TensorRef residual_out, TensorRef norm_out, NormStats st, ConstTensorRef residual,
                        ConstTensorRef x, ConstTensorRef bias, const kernels::Dropout& d, ConstTensorRef w,
                        ConstTensorRef b, int64_t N, int64_t T, Precision p);
  void norm_dropout_backward(TensorRef dresid, TensorRef dx, float* dbias, float* dw, float* db, ConstTensorRef dout,
                             ConstTensorRef inp, ConstTensorRef w, NormStats st, const kernels::Dropout& d, int64_t N,
                             int64_t T, Precision p);

  // ---- the MLP's activation ----
  // fc [N, s.fc] = inp w^T + b and act [N, s.ffn] = its GeLU or SwiGLU, in one op.
  void mlp_in_forward(TensorRef fc, TensorRef act, ConstTensorRef inp, ConstTensorRef w, ConstTensorRef b, int64_t N,
                      Precision p);
  // Back through the output projection (w_out [C, s.ffn]) and the activation:
  // dfc [N, s.fc], dfc_bias += its column sums (null: none), dw_out += dout^T act.
  void mlp_out_backward(TensorRef dfc, float* dfc_bias, float* dw_out, ConstTensorRef dout, ConstTensorRef act,
                        ConstTensorRef fc, ConstTensorRef w_out, int64_t N, Precision p);

 private:
  kernels::Ops& ops_;
  BlockShape s_;
};

}  // namespace occ
