// One transformer layer's forward and backward on a stage (GptStage's
// layer_forward / layer_backward), and the helpers of sequence parallelism
// they use; the rest of the stage is in gpt.cpp.
#include "model/dropout_sites.h"
#include "model/gpt.h"

namespace occ {

kernels::Dropout GptStage::stream_dropout(const MicroBatch& mb, int local, uint64_t site, float p,
                                          bool training) const {
  kernels::Dropout d = dropout(mb, local, site, p, training);
  d.row0 = stream_row0(int64_t(mb.B) * mb.T);  // masks on global rows: SP equals the unsplit run
  return d;
}

TensorRef GptStage::leave_tp_region(TensorRef full, TensorBuffer& local, int64_t N) {
  const int64_t C = cfg_.hidden_size;
  if (!sp()) {
    tp_allreduce(full, N * C);
    return full;
  }
  const int64_t n = stream_rows(N);
  local.resize(size_t(n * C));
  sp_->reduce_scatter(local.ref(), full, n * C);
  return local.ref();
}

void GptStage::layer_forward(int local, ConstTensorRef input, LayerActivations& a, TensorRef out,
                             const MicroBatch& mb, bool training) {
  const LayerParams& w = params_layout_.layer(local);
  const BlockShape& b = block_.shape();
  const ConstTensorRef P = weights_for(layer_spans_[size_t(local)]);
  const int64_t N = int64_t(mb.B) * mb.T, T = mb.T, C = b.C;
  const int64_t n = stream_rows(N);  // the residual stream's rows here (sequence parallel: N / TP)
  const Precision p = opt_.precision;
  branch_.resize(size_t(N * C));
  const TensorRef branch = branch_.ref();
  if (sp()) sp_norm_rows_.resize(size_t(n * C));
  // A norm's output as it is computed: this rank's rows (then all-gathered
  // into the layer's whole copy, which backward's weight gradients read), or the copy itself.
  const TensorRef ln1 = sp() ? sp_norm_rows_.ref() : a.ln1.ref(), ln2 = sp() ? sp_norm_rows_.ref() : a.ln2.ref();

  // Attention: norm -> column-parallel QKV (this rank's query groups) -> RoPE on
  // q and k -> causal attention -> row-parallel out-projection.
  // Each tensor is rounded to the training precision as it is produced (lp: a
  // no-op in fp32 and for 16-bit storage, whose kernels round as they store).
  block_.norm_forward(ln1, stats(a.ln1_mean, a.ln1_rstd), input, P + w.ln1_w, at(P, w.ln1_b), n);
  lp(ln1, n * C);
  if (sp()) sp_->all_gather(a.ln1.ref(), ln1, n * C);
  ops_.linear_forward(a.qkv.ref(), a.ln1.ref(), P + w.qkv_w, at(P, w.qkv_b), N, C, b.qkv, p);
  lp(a.qkv.ref(), N * b.qkv);
  const kernels::AttentionShape shape = attention_shape(mb.B, mb.T);
  rope(a.qkv.ref(), shape, false);
  const kernels::Dropout attn_drop = dropout(mb, local, kAttentionDropout, cfg_.attention_dropout, training);
  float* saved = a.attn_saved.data();
  if (a.attn_saved.empty()) {  // selective recomputation: backward rebuilds it
    recompute_saved_.resize(size_t(ops_.attention_saved_floats(shape, attn_drop, storage_)));
    saved = recompute_saved_.data();
  }
  ops_.attention_forward(a.atty.ref(), saved, a.qkv.ref(), shape, attn_drop);
  lp(a.atty.ref(), N * b.attn);
  ops_.linear_forward(branch, a.atty.ref(), P + w.proj_w, nullptr, N, b.attn, C, p);
  lp(branch, N * C);
  const TensorRef attn_out = leave_tp_region(branch, sp_branch_rows_, N);
  // residual1 = input + dropout(attn_out + bias), and the MLP's norm of it, in one pass.
  block_.add_norm_forward(a.residual1.ref(), ln2, stats(a.ln2_mean, a.ln2_rstd), input, attn_out, at(P, w.proj_b),
                          stream_dropout(mb, local, kAttentionOutDropout, cfg_.hidden_dropout, training), P + w.ln2_w,
                          at(P, w.ln2_b), n, T, p);
  if (sp()) sp_->all_gather(a.ln2.ref(), ln2, n * C);

  // MLP: column-parallel h->4h with its GeLU (or [gate | up] with SwiGLU) -> row-parallel 4h->h.
  block_.mlp_in_forward(a.fc.ref(), a.fc_act.ref(), a.ln2.ref(), P + w.fc_w, at(P, w.fc_b), N, p);
  ops_.linear_forward(branch, a.fc_act.ref(), P + w.fcproj_w, nullptr, N, b.ffn, C, p);
  lp(branch, N * C);
  const TensorRef mlp_out = leave_tp_region(branch, sp_branch_rows_, N);
  ops_.bias_dropout_add_forward(out, a.residual1.ref(), mlp_out, at(P, w.fcproj_b),
                                stream_dropout(mb, local, kMlpOutDropout, cfg_.hidden_dropout, training), n, T, C);
  lp(out, n * C);
}

void GptStage::layer_backward(int local, ConstTensorRef input, LayerActivations& a, TensorRef dresid,
                              const MicroBatch& mb) {
  const LayerParams& w = params_layout_.layer(local);
  const BlockShape& b = block_.shape();
  const ConstTensorRef P = weights();
  float* G = grads_.data();
  const int64_t N = int64_t(mb.B) * mb.T, T = mb.T, C = b.C;
  const int64_t n = stream_rows(N);  // the residual stream's rows here (sequence parallel: N / TP)
  const Precision p = opt_.precision;
  d_branch_.resize(size_t(N * C));
  d_fc_.resize(size_t(N * b.fc));
  d_atty_.resize(size_t(N * b.attn));
  d_qkv_.resize(size_t(N * b.qkv));
  if (sp()) sp_branch_rows_.resize(size_t(n * C));
  const TensorRef d_branch = d_branch_.ref(), d_ln = d_ln_.ref();
  // A row-parallel layer's output gradient on the residual stream's rows;
  // sequence parallel, all-gathered into d_branch (the reduce-scatter's backward).
  const TensorRef d_branch_rows = sp() ? sp_branch_rows_.ref() : d_branch;

  // MLP branch (dresid is the gradient of the layer output). Activation
  // gradients are rounded to the training precision as they are produced;
  // parameter gradients accumulate in fp32.
  ops_.bias_dropout_add_backward(d_branch_rows, grad(w.fcproj_b), dresid,
                                 stream_dropout(mb, local, kMlpOutDropout, cfg_.hidden_dropout, true), n, T, C);
  lp(d_branch_rows, n * C);
  if (sp()) sp_->all_gather(d_branch, d_branch_rows, n * C);
  // Through the 4h->h projection and the GeLU / SwiGLU in one step (fc's bias gradient with it).
  block_.mlp_out_backward(d_fc_.ref(), grad(w.fc_b), G + w.fcproj_w, d_branch, a.fc_act.ref(), a.fc.ref(),
                          P + w.fcproj_w, N, p);
  ops_.linear_backward(d_ln, G + w.fc_w, nullptr, d_fc_.ref(), a.ln2.ref(), P + w.fc_w, N, C, b.fc, false, p);
  lp(d_ln, N * C);
  // The all-gather's backward: a reduce-scatter (sequence parallel), else an all-reduce.
  const TensorRef d_ln2 = leave_tp_region(d_ln, sp_norm_rows_, N);
  // The MLP norm's backward into dresid, then (the attention branch's
  // bias-dropout-add) the gradient of its output projection, in one pass.
  block_.norm_dropout_backward(dresid, d_branch_rows, grad(w.proj_b), G + w.ln2_w, grad(w.ln2_b), d_ln2,
                               a.residual1.ref(), P + w.ln2_w, stats(a.ln2_mean, a.ln2_rstd),
                               stream_dropout(mb, local, kAttentionOutDropout, cfg_.hidden_dropout, true), n, T, p);
  if (sp()) sp_->all_gather(d_branch, d_branch_rows, n * C);

  // Attention branch (dresid is now the gradient of residual1).
  ops_.linear_backward(d_atty_.ref(), G + w.proj_w, nullptr, d_branch, a.atty.ref(), P + w.proj_w, N, b.attn, C,
                       false, p);
  lp(d_atty_.ref(), N * b.attn);
  const kernels::AttentionShape shape = attention_shape(mb.B, mb.T);
  const kernels::Dropout attn_drop = dropout(mb, local, kAttentionDropout, cfg_.attention_dropout, true);
  const float* saved = a.attn_saved.data();
  if (a.attn_saved.empty()) {
    // Selective recomputation: rebuild attention's saved state from qkv; the
    // recomputed output equals a.atty and goes to a sink.
    recompute_saved_.resize(size_t(ops_.attention_saved_floats(shape, attn_drop, storage_)));
    recompute_out_.resize(size_t(N * b.attn));
    ops_.attention_forward(recompute_out_.ref(), recompute_saved_.data(), a.qkv.ref(), shape, attn_drop);
    saved = recompute_saved_.data();
  }
  ops_.attention_backward(d_qkv_.ref(), d_atty_.ref(), a.qkv.ref(), a.atty.ref(), saved, shape, attn_drop);
  lp(d_qkv_.ref(), N * b.qkv);
  rope(d_qkv_.ref(), shape, true);  // to the gradient of the unrotated q and k
  ops_.linear_backward(d_ln, G + w.qkv_w, grad(w.qkv_b), d_qkv_.ref(), a.ln1.ref(), P + w.qkv_w, N, C, b.qkv, false,
                       p);
  lp(d_ln, N * C);
  const TensorRef d_ln1 = leave_tp_region(d_ln, sp_norm_rows_, N);
  block_.norm_backward(dresid, G + w.ln1_w, grad(w.ln1_b), d_ln1, input, P + w.ln1_w, stats(a.ln1_mean, a.ln1_rstd),
                       n);
  lp(dresid, n * C);
}

}  // namespace occ
