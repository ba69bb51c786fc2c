#include "model/gpt.h"

#include "core/rng.h"

namespace occ {

namespace {
// Dropout sites, part of the mask key.
enum Site : uint64_t { kEmbeddingDropout = 0, kAttentionDropout = 1, kAttentionOutDropout = 2, kMlpOutDropout = 3 };
}  // namespace

GptStage::GptStage(const GptConfig& cfg, const ParallelLayout& layout, Communicator& tp, uint64_t seed,
                   StageOptions options)
    : cfg_(cfg),
      layout_(layout),
      tp_(tp),
      seed_(seed),
      opt_(options),
      ops_(options.ops ? *options.ops : kernels::ops_for(options.device)),
      params_layout_(cfg, layout),
      params_(options.device),
      grads_(options.device),
      params_lp_(options.device),
      branch_(options.device),
      d_resid_(options.device),
      d_ln_(options.device),
      d_qkv_(options.device),
      d_atty_(options.device),
      d_fc_(options.device),
      d_branch_(options.device),
      ce_target_(options.device),
      recompute_layer_(options.device),
      recompute_saved_(options.device),
      recompute_out_(options.device) {
  cfg.validate(layout);
  chunk_layers_ = params_layout_.num_local_layers() / layout.vp_size;
  // The init is a pure function of (seed, tensor, global index), drawn on the host.
  std::vector<float> host(size_t(params_layout_.total()), 0.0f);
  params_layout_.initialize(host.data(), seed);
  params_.assign_from_host(host);
  grads_.resize(host.size());
}

void GptStage::zero_grads() { grads_.zero(); }

const float* GptStage::weights() {
  if (opt_.precision == Precision::Fp32) return params_.data();
  if (weights_stale_) {
    params_lp_.resize(params_.size());
    ops_.copy(params_lp_.data(), params_.data(), int64_t(params_.size()));
    lp(params_lp_.data(), int64_t(params_lp_.size()));
    weights_stale_ = false;
  }
  return params_lp_.data();
}

void GptStage::tp_allreduce(float* data, size_t count) {
  if (tp_.size() == 1) return;
  ScopedPhase t(timers_, "tp_allreduce");
  tp_.allreduce_sum(data, count, Traffic::TensorParallel);
}

kernels::Dropout GptStage::dropout(const MicroBatch& mb, int local, uint64_t site, float p, bool training) const {
  const uint64_t layer_key = uint64_t(params_layout_.layer_index(local) + 1);
  return kernels::Dropout{make_key(seed_, mb.iteration, layer_key, site), training ? p : 0.0f, mb.sample_base};
}

kernels::AttentionShape GptStage::attention_shape(int B, int T) const {
  const int64_t Hl = cfg_.num_attention_heads / layout_.tp_size;
  return {B, T, Hl, cfg_.head_dim(), layout_.tp_rank * Hl, cfg_.num_attention_heads};
}

void GptStage::allocate_layer(LayerActivations& a, int B, int T, bool training, bool keep_attention) const {
  const size_t N = size_t(B) * T, C = cfg_.hidden_size, tp = layout_.tp_size;
  const size_t Cl = C / tp, Fl = cfg_.ffn_hidden_size() / tp;
  a.ln1.resize(N * C);
  a.ln1_mean.resize(N);
  a.ln1_rstd.resize(N);
  a.qkv.resize(N * 3 * Cl);
  const kernels::Dropout attn_drop{0, training ? cfg_.attention_dropout : 0.0f, 0};
  a.attn_saved.resize(keep_attention ? size_t(ops_.attention_saved_floats(attention_shape(B, T), attn_drop)) : 0);
  a.atty.resize(N * Cl);
  a.residual1.resize(N * C);
  a.ln2.resize(N * C);
  a.ln2_mean.resize(N);
  a.ln2_rstd.resize(N);
  a.fc.resize(N * Fl);
  a.fc_gelu.resize(N * Fl);
}

void GptStage::allocate(StageActivations& acts, int B, int T, bool training, bool head) {
  OCC_CHECK(acts.device == opt_.device, "internal: activations of device {} given to a stage on {}",
            device_name(acts.device), device_name(opt_.device));
  const size_t N = size_t(B) * T, C = cfg_.hidden_size, tp = layout_.tp_size;
  while (acts.layers.size() < size_t(chunk_layers_)) acts.layers.emplace_back(opt_.device);
  const bool full = opt_.recompute == Recompute::Full;
  for (auto& a : acts.layers) {
    a.input.resize(N * C);
    if (!full) allocate_layer(a, B, T, training, opt_.recompute == Recompute::None);
  }
  if (full) allocate_layer(recompute_layer_, B, T, training, true);
  acts.output.resize(N * C);
  if (head) {  // only the slots the LM head runs in
    const size_t Vl = size_t(cfg_.padded_vocab_size()) / tp;
    acts.lnf.resize(N * C);
    acts.lnf_mean.resize(N);
    acts.lnf_rstd.resize(N);
    acts.logits.resize(N * Vl);
    acts.ce_max.resize(N);
    acts.ce_sum_exp.resize(N);
  }
}

const int32_t* GptStage::upload_ids(DeviceBuffer<int32_t>& buf, const int32_t* host, int64_t n) {
  if (!host || opt_.device == Device::Cpu) return host;
  buf.resize(size_t(n));
  ops_.upload_tokens(buf.data(), host, n);
  return buf.data();
}

LayerActivations& GptStage::layer_work(StageActivations& acts, int l) {
  return opt_.recompute == Recompute::Full ? recompute_layer_ : acts.layers[size_t(l)];
}

double GptStage::forward(StageActivations& acts, const MicroBatch& mb, const float* x_in, float* x_out,
                         bool training, int chunk) {
  OCC_CHECK(chunk >= 0 && chunk < layout_.vp_size, "internal: model chunk {} of {}", chunk, layout_.vp_size);
  allocate(acts, mb.B, mb.T, training, layout_.holds_head(chunk));
  const int64_t N = int64_t(mb.B) * mb.T, C = cfg_.hidden_size;
  const float* P = weights();
  const auto& pl = params_layout_;
  float* x = chunk_layers_ > 0 ? acts.layers[0].input.data() : acts.output.data();
  const int first_layer = chunk * chunk_layers_;  // local index of the chunk's first layer

  if (layout_.holds_embedding(chunk)) {
    const int64_t Vl = cfg_.padded_vocab_size() / layout_.tp_size, v0 = layout_.tp_rank * Vl;
    const int32_t* tokens = upload_ids(acts.tokens, mb.inputs, N);
    ops_.embedding_forward(x, tokens, P + pl.word_embedding, v0, Vl, N, C);
    tp_allreduce(x, size_t(N * C));
    ops_.position_forward(x, P + pl.position_embedding, N, mb.T, C);
    if (training)
      ops_.dropout_inplace(
          x, {make_key(seed_, mb.iteration, 0, kEmbeddingDropout), cfg_.hidden_dropout, mb.sample_base}, N, mb.T, C);
    lp(x, N * C);
  } else {
    ops_.copy(x, x_in, N * C);
  }

  for (int l = 0; l < chunk_layers_; ++l) {
    float* out = l + 1 < chunk_layers_ ? acts.layers[size_t(l) + 1].input.data() : acts.output.data();
    layer_forward(first_layer + l, acts.layers[size_t(l)].input.data(), layer_work(acts, l), out, mb, training);
  }

  if (!layout_.holds_head(chunk)) {
    ops_.copy(x_out, acts.output.data(), N * C);
    return 0.0;
  }
  // Final LayerNorm, LM head against the (tied) word embedding, cross-entropy.
  const int64_t Vl = cfg_.padded_vocab_size() / layout_.tp_size, v0 = layout_.tp_rank * Vl;
  ops_.layernorm_forward(acts.lnf.data(), acts.lnf_mean.data(), acts.lnf_rstd.data(), acts.output.data(),
                         P + pl.final_ln_w, P + pl.final_ln_b, N, C, cfg_.layernorm_epsilon);
  lp(acts.lnf.data(), N * C);
  float* logits = acts.logits.data();
  ops_.linear_forward(logits, acts.lnf.data(), P + pl.head_weight, nullptr, N, C, Vl, opt_.precision);
  lp(logits, N * Vl);  // the cross-entropy itself runs in fp32, as Megatron's
  if (!mb.labels) return 0.0;
  const int32_t* labels = upload_ids(acts.labels, mb.labels, N);
  if (layout_.tp_size == 1) {
    // d loss / d logits is computed here while each row is in cache.
    const double loss = ops_.cross_entropy_fused(logits, labels, training ? mb.grad_scale : 0.0f, N, Vl);
    if (training) lp(logits, N * Vl);
    return loss;
  }
  float* mx = acts.ce_max.data();
  float* se = acts.ce_sum_exp.data();
  ce_target_.resize(size_t(N));
  ops_.row_max(mx, logits, N, Vl);
  {
    ScopedPhase t(timers_, "tp_allreduce");
    tp_.allreduce_max(mx, size_t(N), Traffic::TensorParallel);
  }
  ops_.row_sum_exp(se, logits, mx, N, Vl);
  ops_.target_logit(ce_target_.data(), logits, labels, v0, N, Vl);
  tp_allreduce(se, size_t(N));
  tp_allreduce(ce_target_.data(), size_t(N));
  return ops_.cross_entropy_loss_sum(mx, se, ce_target_.data(), N);
}

void GptStage::layer_forward(int local, const float* input, LayerActivations& a, float* out, const MicroBatch& mb,
                             bool training) {
  const LayerParams& w = params_layout_.layer(local);
  const float* P = weights();
  const int64_t N = int64_t(mb.B) * mb.T, T = mb.T, C = cfg_.hidden_size, tp = layout_.tp_size;
  const int64_t Cl = C / tp, Fl = cfg_.ffn_hidden_size() / tp;
  branch_.resize(size_t(N * C));

  // Attention: LN -> column-parallel QKV -> causal attention -> row-parallel out-projection.
  // Each tensor is rounded to the training precision as it is produced (lp: no-op in fp32).
  ops_.layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), input, P + w.ln1_w, P + w.ln1_b, N, C,
                         cfg_.layernorm_epsilon);
  lp(a.ln1.data(), N * C);
  ops_.linear_forward(a.qkv.data(), a.ln1.data(), P + w.qkv_w, P + w.qkv_b, N, C, 3 * Cl, opt_.precision);
  lp(a.qkv.data(), N * 3 * Cl);
  const kernels::AttentionShape shape = attention_shape(mb.B, mb.T);
  const kernels::Dropout attn_drop = dropout(mb, local, kAttentionDropout, cfg_.attention_dropout, training);
  float* saved = a.attn_saved.data();
  if (a.attn_saved.empty()) {  // selective recomputation: backward rebuilds it
    recompute_saved_.resize(size_t(ops_.attention_saved_floats(shape, attn_drop)));
    saved = recompute_saved_.data();
  }
  ops_.attention_forward(a.atty.data(), saved, a.qkv.data(), shape, attn_drop);
  lp(a.atty.data(), N * Cl);
  ops_.linear_forward(branch_.data(), a.atty.data(), P + w.proj_w, nullptr, N, Cl, C, opt_.precision);
  lp(branch_.data(), N * C);
  tp_allreduce(branch_.data(), size_t(N * C));
  ops_.bias_dropout_add_forward(a.residual1.data(), input, branch_.data(), P + w.proj_b,
                                dropout(mb, local, kAttentionOutDropout, cfg_.hidden_dropout, training), N, T, C);
  lp(a.residual1.data(), N * C);

  // MLP: LN -> column-parallel h->4h -> GeLU -> row-parallel 4h->h.
  ops_.layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.residual1.data(), P + w.ln2_w,
                         P + w.ln2_b, N, C, cfg_.layernorm_epsilon);
  lp(a.ln2.data(), N * C);
  ops_.linear_forward(a.fc.data(), a.ln2.data(), P + w.fc_w, P + w.fc_b, N, C, Fl, opt_.precision);
  lp(a.fc.data(), N * Fl);
  ops_.gelu_forward(a.fc_gelu.data(), a.fc.data(), N * Fl);
  lp(a.fc_gelu.data(), N * Fl);
  ops_.linear_forward(branch_.data(), a.fc_gelu.data(), P + w.fcproj_w, nullptr, N, Fl, C, opt_.precision);
  lp(branch_.data(), N * C);
  tp_allreduce(branch_.data(), size_t(N * C));
  ops_.bias_dropout_add_forward(out, a.residual1.data(), branch_.data(), P + w.fcproj_b,
                                dropout(mb, local, kMlpOutDropout, cfg_.hidden_dropout, training), N, T, C);
  lp(out, N * C);
}

void GptStage::backward(StageActivations& acts, const MicroBatch& mb, const float* dx_out, float* dx_in,
                        const std::function<void(int64_t)>& grads_final, int chunk) {
  OCC_CHECK(chunk >= 0 && chunk < layout_.vp_size, "internal: model chunk {} of {}", chunk, layout_.vp_size);
  const int first_layer = chunk * chunk_layers_;
  auto report = [&](int64_t offset) {
    if (grads_final) grads_final(offset);
  };
  const int64_t N = int64_t(mb.B) * mb.T, C = cfg_.hidden_size;
  const float* P = weights();
  float* G = grads_.data();
  const auto& pl = params_layout_;
  d_resid_.resize(size_t(N * C));
  d_ln_.resize(size_t(N * C));

  if (layout_.holds_head(chunk)) {
    const int64_t Vl = cfg_.padded_vocab_size() / layout_.tp_size, v0 = layout_.tp_rank * Vl;
    float* dlogits = acts.logits.data();
    if (layout_.tp_size > 1)
      ops_.cross_entropy_backward_inplace(dlogits, acts.ce_max.data(), acts.ce_sum_exp.data(),
                                          uploaded_ids(acts.labels, mb.labels), v0, mb.grad_scale, N, Vl);
    if (layout_.tp_size > 1) lp(dlogits, N * Vl);
    ops_.linear_backward(d_ln_.data(), G + pl.head_weight, nullptr, dlogits, acts.lnf.data(), P + pl.head_weight, N,
                         C, Vl, false, opt_.precision);
    lp(d_ln_.data(), N * C);
    tp_allreduce(d_ln_.data(), size_t(N * C));
    ops_.fill(d_resid_.data(), 0.0f, N * C);
    ops_.layernorm_backward(d_resid_.data(), G + pl.final_ln_w, G + pl.final_ln_b, d_ln_.data(), acts.output.data(),
                            P + pl.final_ln_w, acts.lnf_mean.data(), acts.lnf_rstd.data(), N, C);
    lp(d_resid_.data(), N * C);
    report(pl.final_ln_w);
  } else {
    ops_.copy(d_resid_.data(), dx_out, N * C);
  }

  for (int l = chunk_layers_ - 1; l >= 0; --l) {
    const float* input = acts.layers[size_t(l)].input.data();
    if (opt_.recompute == Recompute::Full) {
      // Rebuild the layer's activations from its input (same kernels, same dropout keys).
      recompute_out_.resize(size_t(N * C));
      layer_forward(first_layer + l, input, recompute_layer_, recompute_out_.data(), mb, true);
    }
    layer_backward(first_layer + l, input, layer_work(acts, l), d_resid_.data(), mb);
    report(pl.layer(first_layer + l).ln1_w);
  }

  if (layout_.holds_embedding(chunk)) {
    const int64_t Vl = cfg_.padded_vocab_size() / layout_.tp_size, v0 = layout_.tp_rank * Vl;
    // The embedding's TP all-reduce has an identity backward: every rank already holds the full gradient.
    ops_.dropout_inplace(d_resid_.data(),
                         {make_key(seed_, mb.iteration, 0, kEmbeddingDropout), cfg_.hidden_dropout, mb.sample_base},
                         N, mb.T, C);
    ops_.position_backward(G + pl.position_embedding, d_resid_.data(), N, mb.T, C);
    ops_.embedding_backward(G + pl.word_embedding, d_resid_.data(), uploaded_ids(acts.tokens, mb.inputs), v0, Vl,
                            N, C);
    report(0);
  } else {
    ops_.copy(dx_in, d_resid_.data(), N * C);
  }
}

void GptStage::layer_backward(int local, const float* input, LayerActivations& a, float* dresid,
                              const MicroBatch& mb) {
  const LayerParams& w = params_layout_.layer(local);
  const float* P = weights();
  float* G = grads_.data();
  const int64_t N = int64_t(mb.B) * mb.T, T = mb.T, C = cfg_.hidden_size, tp = layout_.tp_size;
  const int64_t Cl = C / tp, Fl = cfg_.ffn_hidden_size() / tp;
  d_branch_.resize(size_t(N * C));
  d_fc_.resize(size_t(N * Fl));
  d_atty_.resize(size_t(N * Cl));
  d_qkv_.resize(size_t(N * 3 * Cl));

  // MLP branch (dresid is the gradient of the layer output). Activation
  // gradients are rounded to the training precision as they are produced;
  // parameter gradients accumulate in fp32.
  ops_.bias_dropout_add_backward(d_branch_.data(), G + w.fcproj_b, dresid,
                                 dropout(mb, local, kMlpOutDropout, cfg_.hidden_dropout, true), N, T, C);
  lp(d_branch_.data(), N * C);
  ops_.linear_backward(d_fc_.data(), G + w.fcproj_w, nullptr, d_branch_.data(), a.fc_gelu.data(), P + w.fcproj_w, N,
                       Fl, C, false, opt_.precision);
  lp(d_fc_.data(), N * Fl);
  ops_.gelu_backward(d_fc_.data(), a.fc.data(), d_fc_.data(), N * Fl);
  lp(d_fc_.data(), N * Fl);
  ops_.linear_backward(d_ln_.data(), G + w.fc_w, G + w.fc_b, d_fc_.data(), a.ln2.data(), P + w.fc_w, N, C, Fl, false,
                       opt_.precision);
  lp(d_ln_.data(), N * C);
  tp_allreduce(d_ln_.data(), size_t(N * C));
  ops_.layernorm_backward(dresid, G + w.ln2_w, G + w.ln2_b, d_ln_.data(), a.residual1.data(), P + w.ln2_w,
                          a.ln2_mean.data(), a.ln2_rstd.data(), N, C);
  lp(dresid, N * C);

  // Attention branch (dresid is now the gradient of residual1).
  ops_.bias_dropout_add_backward(d_branch_.data(), G + w.proj_b, dresid,
                                 dropout(mb, local, kAttentionOutDropout, cfg_.hidden_dropout, true), N, T, C);
  lp(d_branch_.data(), N * C);
  ops_.linear_backward(d_atty_.data(), G + w.proj_w, nullptr, d_branch_.data(), a.atty.data(), P + w.proj_w, N, Cl,
                       C, false, opt_.precision);
  lp(d_atty_.data(), N * Cl);
  const kernels::AttentionShape shape = attention_shape(mb.B, mb.T);
  const kernels::Dropout attn_drop = dropout(mb, local, kAttentionDropout, cfg_.attention_dropout, true);
  const float* saved = a.attn_saved.data();
  if (a.attn_saved.empty()) {
    // Selective recomputation: rebuild attention's saved state from qkv; the
    // recomputed output equals a.atty and goes to a sink.
    recompute_saved_.resize(size_t(ops_.attention_saved_floats(shape, attn_drop)));
    recompute_out_.resize(size_t(N * Cl));
    ops_.attention_forward(recompute_out_.data(), recompute_saved_.data(), a.qkv.data(), shape, attn_drop);
    saved = recompute_saved_.data();
  }
  ops_.attention_backward(d_qkv_.data(), d_atty_.data(), a.qkv.data(), saved, shape, attn_drop);
  lp(d_qkv_.data(), N * 3 * Cl);
  ops_.linear_backward(d_ln_.data(), G + w.qkv_w, G + w.qkv_b, d_qkv_.data(), a.ln1.data(), P + w.qkv_w, N, C,
                       3 * Cl, false, opt_.precision);
  lp(d_ln_.data(), N * C);
  tp_allreduce(d_ln_.data(), size_t(N * C));
  ops_.layernorm_backward(dresid, G + w.ln1_w, G + w.ln1_b, d_ln_.data(), input, P + w.ln1_w, a.ln1_mean.data(),
                          a.ln1_rstd.data(), N, C);
  lp(dresid, N * C);
}

}  // namespace occ
