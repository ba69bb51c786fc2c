#include "model/gpt.h"

#include <algorithm>
#include <cstring>

#include "core/rng.h"
#include "kernels/kernels.h"

namespace occ {

namespace k = kernels;

namespace {
// Dropout sites, part of the mask key.
enum Site : uint64_t { kEmbeddingDropout = 0, kAttentionDropout = 1, kAttentionOutDropout = 2, kMlpOutDropout = 3 };

void resize(std::vector<float>& v, size_t n) {
  if (v.size() != n) v.assign(n, 0.0f);
}
}  // namespace

GptStage::GptStage(const GptConfig& cfg, const ParallelLayout& layout, Communicator& tp, uint64_t seed)
    : cfg_(cfg),
      layout_(layout),
      tp_(tp),
      seed_(seed),
      layers_(stage_layers(cfg.num_layers, layout)),
      params_layout_(cfg, layout) {
  cfg.validate(layout);
  params_.assign(size_t(params_layout_.total()), 0.0f);
  grads_.assign(size_t(params_layout_.total()), 0.0f);
  params_layout_.initialize(params_.data(), seed);
}

void GptStage::zero_grads() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

void GptStage::tp_allreduce(float* data, size_t count) {
  if (tp_.size() == 1) return;
  ScopedPhase t(timers_, "tp_allreduce");
  tp_.allreduce_sum(data, count, Traffic::TensorParallel);
}

void GptStage::allocate(StageActivations& acts, int B, int T, bool training) const {
  const size_t N = size_t(B) * T, C = cfg_.hidden_size, tp = layout_.tp_size;
  const size_t Cl = C / tp, Hl = cfg_.num_attention_heads / tp, Fl = cfg_.ffn_hidden_size() / tp;
  acts.layers.resize(size_t(layers_.count()));
  for (auto& a : acts.layers) {
    resize(a.input, N * C);
    resize(a.ln1, N * C);
    resize(a.ln1_mean, N);
    resize(a.ln1_rstd, N);
    resize(a.qkv, N * 3 * Cl);
    resize(a.probs, size_t(B) * Hl * T * T);
    resize(a.probs_dropped, training && cfg_.attention_dropout > 0 ? size_t(B) * Hl * T * T : 0);
    resize(a.atty, N * Cl);
    resize(a.residual1, N * C);
    resize(a.ln2, N * C);
    resize(a.ln2_mean, N);
    resize(a.ln2_rstd, N);
    resize(a.fc, N * Fl);
    resize(a.fc_gelu, N * Fl);
  }
  resize(acts.output, N * C);
  if (layout_.last_stage()) {
    const size_t Vl = size_t(cfg_.padded_vocab_size()) / tp;
    resize(acts.lnf, N * C);
    resize(acts.lnf_mean, N);
    resize(acts.lnf_rstd, N);
    resize(acts.logits, N * Vl);
    resize(acts.ce_max, N);
    resize(acts.ce_sum_exp, N);
  }
}

double GptStage::forward(StageActivations& acts, const MicroBatch& mb, const float* x_in, float* x_out,
                         bool training) {
  allocate(acts, mb.B, mb.T, training);
  const int64_t N = int64_t(mb.B) * mb.T, C = cfg_.hidden_size;
  const float* P = params_.data();
  const auto& pl = params_layout_;
  float* x = layers_.count() > 0 ? acts.layers[0].input.data() : acts.output.data();

  if (layout_.first_stage()) {
    const int64_t Vl = cfg_.padded_vocab_size() / layout_.tp_size, v0 = layout_.tp_rank * Vl;
    k::embedding_forward(x, mb.inputs, P + pl.word_embedding, v0, Vl, N, C);
    tp_allreduce(x, size_t(N * C));
    k::position_forward(x, P + pl.position_embedding, N, mb.T, C);
    if (training)
      k::dropout_inplace(x, {make_key(seed_, mb.iteration, 0, kEmbeddingDropout), cfg_.hidden_dropout, mb.sample_base},
                         N, mb.T, C);
  } else {
    std::memcpy(x, x_in, sizeof(float) * size_t(N * C));
  }

  for (int l = 0; l < layers_.count(); ++l) {
    float* out = l + 1 < layers_.count() ? acts.layers[size_t(l) + 1].input.data() : acts.output.data();
    layer_forward(l, acts.layers[size_t(l)], out, mb, training);
  }

  if (!layout_.last_stage()) {
    std::memcpy(x_out, acts.output.data(), sizeof(float) * size_t(N * C));
    return 0.0;
  }
  // Final LayerNorm, LM head against the (tied) word embedding, cross-entropy.
  const int64_t Vl = cfg_.padded_vocab_size() / layout_.tp_size, v0 = layout_.tp_rank * Vl;
  k::layernorm_forward(acts.lnf.data(), acts.lnf_mean.data(), acts.lnf_rstd.data(), acts.output.data(),
                       P + pl.final_ln_w, P + pl.final_ln_b, N, C, cfg_.layernorm_epsilon);
  float* logits = acts.logits.data();
  k::linear_forward(logits, acts.lnf.data(), P + pl.head_weight, nullptr, N, C, Vl);
  if (!mb.labels) return 0.0;
  if (layout_.tp_size == 1) {
    // d loss / d logits is computed here while each row is in cache.
    return k::cross_entropy_fused(logits, mb.labels, training ? mb.grad_scale : 0.0f, N, Vl);
  }
  float* mx = acts.ce_max.data();
  float* se = acts.ce_sum_exp.data();
  resize(ce_target_, size_t(N));
  k::row_max(mx, logits, N, Vl);
  {
    ScopedPhase t(timers_, "tp_allreduce");
    tp_.allreduce_max(mx, size_t(N), Traffic::TensorParallel);
  }
  k::row_sum_exp(se, logits, mx, N, Vl);
  k::target_logit(ce_target_.data(), logits, mb.labels, v0, N, Vl);
  tp_allreduce(se, size_t(N));
  tp_allreduce(ce_target_.data(), size_t(N));
  double loss = 0.0;
  for (int64_t n = 0; n < N; ++n) loss += double(std::log(se[n]) + mx[n] - ce_target_[size_t(n)]);
  return loss;
}

void GptStage::layer_forward(int local, LayerActivations& a, float* out, const MicroBatch& mb, bool training) {
  const LayerParams& lp = params_layout_.layer(local);
  const float* P = params_.data();
  const int64_t N = int64_t(mb.B) * mb.T, T = mb.T, C = cfg_.hidden_size, tp = layout_.tp_size;
  const int64_t Cl = C / tp, Hl = cfg_.num_attention_heads / tp, Fl = cfg_.ffn_hidden_size() / tp;
  const uint64_t layer_key = uint64_t(layers_.begin + local + 1);
  auto dropout = [&](Site site, float p) {
    return k::Dropout{make_key(seed_, mb.iteration, layer_key, site), training ? p : 0.0f, mb.sample_base};
  };
  resize(branch_, size_t(N * C));

  // Attention: LN -> column-parallel QKV -> causal attention -> row-parallel out-projection.
  k::layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), a.input.data(), P + lp.ln1_w,
                       P + lp.ln1_b, N, C, cfg_.layernorm_epsilon);
  k::linear_forward(a.qkv.data(), a.ln1.data(), P + lp.qkv_w, P + lp.qkv_b, N, C, 3 * Cl);
  const k::AttentionShape shape{mb.B, T, Hl, cfg_.head_dim(), layout_.tp_rank * Hl, cfg_.num_attention_heads};
  const k::Dropout attn_drop = dropout(kAttentionDropout, cfg_.attention_dropout);
  k::attention_forward(a.atty.data(), a.probs.data(), attn_drop.active() ? a.probs_dropped.data() : nullptr,
                       a.qkv.data(), shape, attn_drop);
  k::linear_forward(branch_.data(), a.atty.data(), P + lp.proj_w, nullptr, N, Cl, C);
  tp_allreduce(branch_.data(), size_t(N * C));
  k::bias_dropout_add_forward(a.residual1.data(), a.input.data(), branch_.data(), P + lp.proj_b,
                              dropout(kAttentionOutDropout, cfg_.hidden_dropout), N, T, C);

  // MLP: LN -> column-parallel h->4h -> GeLU -> row-parallel 4h->h.
  k::layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.residual1.data(), P + lp.ln2_w,
                       P + lp.ln2_b, N, C, cfg_.layernorm_epsilon);
  k::linear_forward(a.fc.data(), a.ln2.data(), P + lp.fc_w, P + lp.fc_b, N, C, Fl);
  k::gelu_forward(a.fc_gelu.data(), a.fc.data(), N * Fl);
  k::linear_forward(branch_.data(), a.fc_gelu.data(), P + lp.fcproj_w, nullptr, N, Fl, C);
  tp_allreduce(branch_.data(), size_t(N * C));
  k::bias_dropout_add_forward(out, a.residual1.data(), branch_.data(), P + lp.fcproj_b,
                              dropout(kMlpOutDropout, cfg_.hidden_dropout), N, T, C);
}

void GptStage::backward(StageActivations& acts, const MicroBatch& mb, const float* dx_out, float* dx_in,
                        const std::function<void(int64_t)>& grads_final) {
  auto report = [&](int64_t offset) {
    if (grads_final) grads_final(offset);
  };
  const int64_t N = int64_t(mb.B) * mb.T, C = cfg_.hidden_size;
  const float* P = params_.data();
  float* G = grads_.data();
  const auto& pl = params_layout_;
  resize(d_resid_, size_t(N * C));
  resize(d_ln_, size_t(N * C));

  if (layout_.last_stage()) {
    const int64_t Vl = cfg_.padded_vocab_size() / layout_.tp_size, v0 = layout_.tp_rank * Vl;
    float* dlogits = acts.logits.data();
    if (layout_.tp_size > 1)
      k::cross_entropy_backward_inplace(dlogits, acts.ce_max.data(), acts.ce_sum_exp.data(), mb.labels, v0,
                                        mb.grad_scale, N, Vl);
    k::linear_backward(d_ln_.data(), G + pl.head_weight, nullptr, dlogits, acts.lnf.data(), P + pl.head_weight, N, C,
                       Vl);
    tp_allreduce(d_ln_.data(), size_t(N * C));
    std::fill(d_resid_.begin(), d_resid_.end(), 0.0f);
    k::layernorm_backward(d_resid_.data(), G + pl.final_ln_w, G + pl.final_ln_b, d_ln_.data(), acts.output.data(),
                          P + pl.final_ln_w, acts.lnf_mean.data(), acts.lnf_rstd.data(), N, C);
    report(pl.final_ln_w);
  } else {
    std::memcpy(d_resid_.data(), dx_out, sizeof(float) * size_t(N * C));
  }

  for (int l = layers_.count() - 1; l >= 0; --l) {
    layer_backward(l, acts.layers[size_t(l)], d_resid_.data(), mb);
    report(pl.layer(l).ln1_w);
  }

  if (layout_.first_stage()) {
    const int64_t Vl = cfg_.padded_vocab_size() / layout_.tp_size, v0 = layout_.tp_rank * Vl;
    // The embedding's TP all-reduce has an identity backward: every rank already holds the full gradient.
    k::dropout_inplace(d_resid_.data(),
                       {make_key(seed_, mb.iteration, 0, kEmbeddingDropout), cfg_.hidden_dropout, mb.sample_base}, N,
                       mb.T, C);
    k::position_backward(G + pl.position_embedding, d_resid_.data(), N, mb.T, C);
    k::embedding_backward(G + pl.word_embedding, d_resid_.data(), mb.inputs, v0, Vl, N, C);
    report(0);
  } else {
    std::memcpy(dx_in, d_resid_.data(), sizeof(float) * size_t(N * C));
  }
}

void GptStage::layer_backward(int local, LayerActivations& a, float* dresid, const MicroBatch& mb) {
  const LayerParams& lp = params_layout_.layer(local);
  const float* P = params_.data();
  float* G = grads_.data();
  const int64_t N = int64_t(mb.B) * mb.T, T = mb.T, C = cfg_.hidden_size, tp = layout_.tp_size;
  const int64_t Cl = C / tp, Hl = cfg_.num_attention_heads / tp, Fl = cfg_.ffn_hidden_size() / tp;
  const uint64_t layer_key = uint64_t(layers_.begin + local + 1);
  auto dropout = [&](Site site, float p) {
    return k::Dropout{make_key(seed_, mb.iteration, layer_key, site), p, mb.sample_base};
  };
  resize(d_branch_, size_t(N * C));
  resize(d_fc_, size_t(N * Fl));
  resize(d_atty_, size_t(N * Cl));
  resize(d_qkv_, size_t(N * 3 * Cl));

  // MLP branch (dresid is the gradient of the layer output).
  k::bias_dropout_add_backward(d_branch_.data(), G + lp.fcproj_b, dresid, dropout(kMlpOutDropout, cfg_.hidden_dropout),
                               N, T, C);
  k::linear_backward(d_fc_.data(), G + lp.fcproj_w, nullptr, d_branch_.data(), a.fc_gelu.data(), P + lp.fcproj_w, N,
                     Fl, C);
  k::gelu_backward(d_fc_.data(), a.fc.data(), d_fc_.data(), N * Fl);
  k::linear_backward(d_ln_.data(), G + lp.fc_w, G + lp.fc_b, d_fc_.data(), a.ln2.data(), P + lp.fc_w, N, C, Fl);
  tp_allreduce(d_ln_.data(), size_t(N * C));
  k::layernorm_backward(dresid, G + lp.ln2_w, G + lp.ln2_b, d_ln_.data(), a.residual1.data(), P + lp.ln2_w,
                        a.ln2_mean.data(), a.ln2_rstd.data(), N, C);

  // Attention branch (dresid is now the gradient of residual1).
  k::bias_dropout_add_backward(d_branch_.data(), G + lp.proj_b, dresid,
                               dropout(kAttentionOutDropout, cfg_.hidden_dropout), N, T, C);
  k::linear_backward(d_atty_.data(), G + lp.proj_w, nullptr, d_branch_.data(), a.atty.data(), P + lp.proj_w, N, Cl,
                     C);
  const k::AttentionShape shape{mb.B, T, Hl, cfg_.head_dim(), layout_.tp_rank * Hl, cfg_.num_attention_heads};
  const k::Dropout attn_drop = dropout(kAttentionDropout, cfg_.attention_dropout);
  k::attention_backward(d_qkv_.data(), d_atty_.data(), a.qkv.data(), a.probs.data(),
                        attn_drop.active() ? a.probs_dropped.data() : nullptr, shape, attn_drop);
  k::linear_backward(d_ln_.data(), G + lp.qkv_w, G + lp.qkv_b, d_qkv_.data(), a.ln1.data(), P + lp.qkv_w, N, C,
                     3 * Cl);
  tp_allreduce(d_ln_.data(), size_t(N * C));
  k::layernorm_backward(dresid, G + lp.ln1_w, G + lp.ln1_b, d_ln_.data(), a.input.data(), P + lp.ln1_w,
                        a.ln1_mean.data(), a.ln1_rstd.data(), N, C);
}

}  // namespace occ
