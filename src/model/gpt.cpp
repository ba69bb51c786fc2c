#include "model/gpt.h"

#include <algorithm>

#include "core/rng.h"
#include "model/dropout_sites.h"

namespace occ {

namespace {
// The most logits one classifier chunk holds (64 Mi values: 128 MiB in bf16):
// GPT-2's 50,304-word vocabulary then takes 1,280 tokens per chunk, enough
// rows for the LM head's GEMMs to run at full speed, and a chunk never
// approaches the [tokens, vocabulary] logits a whole micro-batch would need.
constexpr int64_t kClassifierValues = int64_t(1) << 26;
}  // namespace

GptStage::GptStage(const GptConfig& cfg, const ParallelLayout& layout, Communicator& tp, uint64_t seed,
                   StageOptions options)
    : cfg_(cfg),
      layout_(layout),
      tp_(tp),
      seed_(seed),
      opt_(options),
      ops_(options.ops ? *options.ops : kernels::ops_for(options.device)),
      block_(ops_, BlockShape::of(cfg, layout.tp_size)),
      params_layout_(cfg, layout),
      params_(options.device),
      grads_(options.device),
      storage_(ops_.storage_format(options.precision)),
      params_lp_(options.device, storage_),
      branch_(options.device, storage_),
      d_resid_(options.device, storage_),
      d_ln_(options.device, storage_),
      d_qkv_(options.device, storage_),
      d_atty_(options.device, storage_),
      d_fc_(options.device, storage_),
      d_branch_(options.device, storage_),
      embedding_(options.device),
      rope_table_(options.device),
      tp_wire_(options.device),
      logits_(options.device, storage_),
      ce_max_(options.device),
      ce_sum_exp_(options.device),
      ce_target_(options.device),
      loss_sum_(options.device, 1),
      recompute_layer_(options.device, storage_),
      recompute_saved_(options.device),
      recompute_out_(options.device, storage_),
      sp_norm_rows_(options.device, storage_),
      sp_branch_rows_(options.device, storage_),
      sp_embedding_(options.device) {
  cfg.validate(layout);
  if (options.sequence_parallel && tp.size() > 1)
    sp_ = std::make_unique<SequenceParallelComm>(tp, ops_, timers_, options.device, options.precision, options.wire);
  chunk_layers_ = params_layout_.num_local_layers() / layout.vp_size;
  // The init is a pure function of (seed, tensor, global index), drawn on the
  // host: on the CPU straight into the parameters (no zeroed copy to fill first).
  params_.resize(size_t(params_layout_.total()));
  if (params_.on_host()) {
    params_layout_.initialize(params_.data(), seed);
  } else {
    std::vector<float> host(params_.size());
    params_layout_.initialize(host.data(), seed);
    params_.copy_from_host(host.data(), host.size());
  }
  grads_.resize(params_.size());  // zero-filled
  if (block_.shape().rope) {
    // The angles of every position a micro-batch may have, computed once on the host.
    rope_positions_ = std::max(cfg.seq_length, cfg.max_position_embeddings);
    std::vector<float> table(size_t(rope_positions_ * block_.shape().rotary_dim));
    kernels::rope_table(table.data(), rope_positions_, block_.shape().rotary_dim, double(cfg.rotary_base));
    rope_table_.assign_from_host(table);
  }
  stale_.assign(1, {0, params_layout_.total()});
  const auto& pl = params_layout_;
  // Biases, norm shifts and learned positions may be absent (Llama): a part's span covers
  // the tensors it has, which the layout places next to each other.
  embedding_span_ = span_covering({pl.word_embedding, pl.position_embedding});
  for (int l = 0; l < pl.num_local_layers(); ++l) {
    const LayerParams& w = pl.layer(l);
    layer_spans_.push_back(span_covering({w.ln1_w, w.ln1_b, w.qkv_w, w.qkv_b, w.proj_w, w.proj_b, w.ln2_w, w.ln2_b,
                                          w.fc_w, w.fc_b, w.fcproj_w, w.fcproj_b}));
  }
  final_ln_span_ = span_covering({pl.final_ln_w, pl.final_ln_b});
  head_weight_span_ = span_covering({pl.head_weight});
}

GptStage::Span GptStage::span_covering(std::initializer_list<int64_t> offsets) const {
  int64_t begin = -1, end = -1;
  for (int64_t offset : offsets) {
    if (offset < 0) continue;
    const ParamTensor* tensor = nullptr;
    for (const ParamTensor& t : params_layout_.tensors())
      if (t.offset == offset) tensor = &t;
    OCC_CHECK(tensor, "internal: no parameter tensor at offset {}", offset);
    begin = begin < 0 ? offset : std::min(begin, offset);
    end = std::max(end, offset + tensor->numel);
  }
  return begin < 0 ? Span{0, 0} : Span{begin, end - begin};
}

void GptStage::zero_grads() { grads_.zero(); }

double GptStage::take_loss_sum() {
  const double loss = ops_.read_double(loss_sum_.data());
  loss_sum_.zero();
  return loss;
}

ConstTensorRef GptStage::weights_for(Span span) {
  if (params_ready_ && span.numel > 0) params_ready_(span.offset, span.numel);
  if (opt_.precision == Precision::Fp32) return params_.data();
  if (params_lp_.size() != params_.size()) params_lp_.resize(params_.size());
  // Rounding is element by element, so refreshing range by range gives the
  // copy a whole refresh would.
  std::vector<Span> still;
  for (const Span& r : stale_) {
    const int64_t lo = std::max(r.offset, span.offset), hi = std::min(r.offset + r.numel, span.offset + span.numel);
    if (lo >= hi) {
      still.push_back(r);
      continue;
    }
    ops_.copy(params_lp_.ref() + lo, params_.data() + lo, hi - lo);  // rounds into 16-bit storage
    lp(params_lp_.ref() + lo, hi - lo);                              // rounds fp32 storage
    if (r.offset < lo) still.push_back({r.offset, lo - r.offset});
    if (hi < r.offset + r.numel) still.push_back({hi, r.offset + r.numel - hi});
  }
  stale_ = std::move(still);
  return params_lp_.ref();
}

void GptStage::tp_allreduce(TensorRef x, int64_t n) {
  if (tp_.size() == 1 || n <= 0) return;
  ScopedPhase t(timers_, "tp_allreduce");
  // A 16-bit tensor on an fp32 wire: the fp32 sum is rounded once as it is
  // copied back, as lp rounds an fp32 tensor's (a 16-bit wire's sum already is).
  wire_allreduce_sum(tp_, ops_, x, n, opt_.wire.activation_sums, Traffic::TensorParallel, tp_wire_);
  lp(x, n);
}

kernels::Dropout GptStage::dropout(const MicroBatch& mb, int local, uint64_t site, float p, bool training) const {
  const uint64_t layer_key = uint64_t(params_layout_.layer_index(local) + 1);
  return kernels::Dropout{make_key(seed_, mb.iteration, layer_key, site), training ? p : 0.0f, mb.sample_base};
}

void GptStage::add_positions(float* e, ConstTensorRef wpe, int64_t row0, int64_t rows, int64_t T) {
  const int64_t C = cfg_.hidden_size;
  // position_forward adds wpe[n % T] to row n: a run that starts inside a
  // sample (at position pos) is its own sample of T = its length, offset by pos.
  for (int64_t done = 0; done < rows;) {
    const int64_t pos = (row0 + done) % T;
    const int64_t len = pos == 0 ? rows - done : std::min(T - pos, rows - done);
    ops_.position_forward(e + done * C, wpe + pos * C, len, pos == 0 ? T : len, C);
    done += len;
  }
}

kernels::AttentionShape GptStage::attention_shape(int B, int T) const {
  const BlockShape& b = block_.shape();
  return {B,
          T,
          b.heads,
          b.D,
          layout_.tp_rank * b.heads,
          cfg_.num_attention_heads,
          b.groups,
          opt_.precision == Precision::Bf16 ? Precision::Bf16 : Precision::Fp32};
}

void GptStage::rope(TensorRef qkv, const kernels::AttentionShape& shape, bool backward) {
  const BlockShape& b = block_.shape();
  if (!b.rope) return;
  OCC_CHECK(shape.T <= rope_positions_, "internal: a micro-batch of {} tokens, RoPE's table has {} positions",
            shape.T, rope_positions_);
  if (backward)
    ops_.rope_backward(qkv, rope_table_.data(), rope_positions_, shape, b.rotary_dim);
  else
    ops_.rope_forward(qkv, rope_table_.data(), rope_positions_, shape, b.rotary_dim);
  lp(qkv, shape.B * shape.T * b.qkv);
}

int64_t GptStage::classifier_rows(int64_t N, int64_t V) const {
  const int64_t values = opt_.classifier_values > 0 ? opt_.classifier_values : kClassifierValues;
  return std::clamp<int64_t>(values / std::max<int64_t>(V, 1), 1, std::max<int64_t>(N, 1));
}

void GptStage::allocate_layer(LayerActivations& a, int B, int T, bool training, bool keep_attention) const {
  const BlockShape& b = block_.shape();
  const size_t N = size_t(B) * T, C = size_t(b.C);
  const size_t rows = size_t(stream_rows(int64_t(N))), mean = b.layernorm() ? rows : 0;
  a.ln1.resize(N * C);
  a.ln1_mean.resize(mean);
  a.ln1_rstd.resize(rows);
  a.qkv.resize(N * size_t(b.qkv));
  const kernels::Dropout attn_drop{0, training ? cfg_.attention_dropout : 0.0f, 0};
  a.attn_saved.resize(keep_attention ? size_t(ops_.attention_saved_floats(attention_shape(B, T), attn_drop, storage_)) : 0);
  a.atty.resize(N * size_t(b.attn));
  a.residual1.resize(rows * C);
  a.ln2.resize(N * C);
  a.ln2_mean.resize(mean);
  a.ln2_rstd.resize(rows);
  a.fc.resize(N * size_t(b.fc));
  a.fc_act.resize(N * size_t(b.ffn));
}

void GptStage::allocate(StageActivations& acts, int B, int T, bool training, bool head) {
  OCC_CHECK(acts.device == opt_.device && acts.storage == storage_,
            "internal: activations of device {} ({}) given to a stage on {} ({})", device_name(acts.device),
            precision_name(acts.storage), device_name(opt_.device), precision_name(storage_));
  const size_t N = size_t(B) * T, C = cfg_.hidden_size, rows = size_t(stream_rows(int64_t(N)));
  while (acts.layers.size() < size_t(chunk_layers_)) acts.layers.emplace_back(opt_.device, storage_);
  const bool full = opt_.recompute == Recompute::Full;
  for (auto& a : acts.layers) {
    a.input.resize(rows * C);
    if (!full) allocate_layer(a, B, T, training, opt_.recompute == Recompute::None);
  }
  if (full) allocate_layer(recompute_layer_, B, T, training, true);
  acts.output.resize(rows * C);
  if (head) {  // only the slots the LM head runs in
    acts.lnf.resize(N * C);
    acts.lnf_mean.resize(block_.shape().layernorm() ? rows : 0);
    acts.lnf_rstd.resize(rows);
    if (training) acts.dlnf.resize(N * C);
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

void GptStage::forward(StageActivations& acts, const MicroBatch& mb, const float* x_in, float* x_out, bool training,
                       int chunk) {
  OCC_CHECK(chunk >= 0 && chunk < layout_.vp_size, "internal: model chunk {} of {}", chunk, layout_.vp_size);
  allocate(acts, mb.B, mb.T, training, layout_.holds_head(chunk));
  const int64_t N = int64_t(mb.B) * mb.T, C = cfg_.hidden_size;
  // The residual stream's rows on this rank: all N, or (sequence parallel) rows [r0, r0 + n).
  const int64_t n = stream_rows(N), r0 = stream_row0(N);
  const auto& pl = params_layout_;
  TensorRef x = chunk_layers_ > 0 ? acts.layers[0].input.ref() : acts.output.ref();
  const int first_layer = chunk * chunk_layers_;  // local index of the chunk's first layer

  if (layout_.holds_embedding(chunk)) {
    // Summed on the activation sums' wire (vocab-parallel: each token's row is
    // non-zero on one TP rank and holds weights of the training precision, so
    // the sum is exact in any format), then stored rounded once. Sequence
    // parallel: reduce-scattered, each rank keeping its rows (Megatron's
    // reduce-scatter of the embeddings), positions and dropout on those rows.
    const int64_t Vl = cfg_.padded_vocab_size() / layout_.tp_size, v0 = layout_.tp_rank * Vl;
    const int32_t* tokens = upload_ids(acts.tokens, mb.inputs, N);
    const ConstTensorRef P = weights_for(embedding_span_);
    embedding_.resize(size_t(N * C));
    float* e = embedding_.data();
    ops_.embedding_forward(e, tokens, P + pl.word_embedding, v0, Vl, N, C);
    if (sp()) {
      ScopedPhase t(timers_, "tp_reduce_scatter");
      sp_embedding_.resize(size_t(n * C));
      wire_reduce_scatter(tp_, ops_, sp_embedding_.data(), e, n * C, opt_.wire.activation_sums,
                          Traffic::TensorParallel, tp_wire_);
      e = sp_embedding_.data();
    } else if (tp_.size() > 1) {
      ScopedPhase t(timers_, "tp_allreduce");
      wire_allreduce_sum(tp_, ops_, e, N * C, opt_.wire.activation_sums, Traffic::TensorParallel, tp_wire_);
    }
    if (cfg_.learned_positions()) add_positions(e, P + pl.position_embedding, r0, n, mb.T);
    if (training)
      ops_.dropout_inplace(
          e, {make_key(seed_, mb.iteration, 0, kEmbeddingDropout), cfg_.hidden_dropout, mb.sample_base, r0}, n, mb.T,
          C);
    ops_.copy(x, e, n * C);
  } else {
    // A message from the previous stage: already of the format unless a lossy
    // compressor decoded it, in which case it is rounded like any activation.
    // (Sequence parallel: this rank's rows of it, all that was received.)
    ops_.copy(x, x_in + r0 * C, n * C);
  }
  lp(x, n * C);

  for (int l = 0; l < chunk_layers_; ++l) {
    TensorRef out = l + 1 < chunk_layers_ ? acts.layers[size_t(l) + 1].input.ref() : acts.output.ref();
    layer_forward(first_layer + l, acts.layers[size_t(l)].input.ref(), layer_work(acts, l), out, mb, training);
  }

  if (!layout_.holds_head(chunk)) {
    ops_.copy(x_out + r0 * C, acts.output.ref(), n * C);  // sequence parallel: the rows the exchange sends
    return;
  }
  // The final norm on this rank's rows; all-gathered before the vocab-parallel LM head.
  const ConstTensorRef P = weights_for(final_ln_span_);
  if (sp()) sp_norm_rows_.resize(size_t(n * C));
  const TensorRef lnf = sp() ? sp_norm_rows_.ref() : acts.lnf.ref();
  block_.norm_forward(lnf, stats(acts.lnf_mean, acts.lnf_rstd), acts.output.ref(), P + pl.final_ln_w,
                      at(P, pl.final_ln_b), n);
  lp(lnf, n * C);
  if (sp()) sp_->all_gather(acts.lnf.ref(), lnf, n * C);
  classifier(acts, mb, training);
}

void GptStage::classifier(StageActivations& acts, const MicroBatch& mb, bool training) {
  // LM head against the (tied) word embedding, then cross-entropy in fp32 from
  // the logits as stored (Megatron's), chunk by chunk over the tokens. When
  // training, each chunk's logits become d loss / d logits in place and go
  // straight into the head's weight gradient and d loss / d lnf.
  const int64_t N = int64_t(mb.B) * mb.T, C = cfg_.hidden_size;
  const int64_t Vl = cfg_.padded_vocab_size() / layout_.tp_size, v0 = layout_.tp_rank * Vl;
  const ConstTensorRef P = weights_for(head_weight_span_);
  const auto& pl = params_layout_;
  training = training && mb.labels;
  const int32_t* labels = mb.labels ? upload_ids(acts.labels, mb.labels, N) : nullptr;
  if (mb.keep_logits) acts.logits.resize(size_t(N * Vl));
  const int64_t rows = mb.keep_logits ? N : classifier_rows(N, Vl);
  if (!mb.keep_logits) logits_.resize(size_t(rows * Vl));
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int64_t n = std::min(rows, N - r0);
    const TensorRef logits = mb.keep_logits ? acts.logits.ref() : logits_.ref();
    const ConstTensorRef lnf = acts.lnf.ref() + r0 * C;
    ops_.linear_forward(logits, lnf, P + pl.head_weight, nullptr, n, C, Vl, opt_.precision);
    lp(logits, n * Vl);
    if (!labels) continue;
    const int32_t* chunk_labels = labels + r0;
    if (layout_.tp_size == 1) {
      // d loss / d logits is computed here while each row is in cache.
      ops_.cross_entropy_fused(logits, chunk_labels, training ? mb.grad_scale : 0.0f, n, Vl, loss_sum_.data());
    } else {
      ce_max_.resize(size_t(rows));
      ce_sum_exp_.resize(size_t(rows));
      ce_target_.resize(size_t(rows));
      float* mx = ce_max_.data();
      float* se = ce_sum_exp_.data();
      float* target = ce_target_.data();
      ops_.row_max(mx, logits, n, Vl);
      {
        ScopedPhase t(timers_, "tp_allreduce");
        tp_.allreduce_max(mx, size_t(n), Traffic::TensorParallel);
      }
      ops_.row_sum_exp(se, logits, mx, n, Vl);
      ops_.target_logit(target, logits, chunk_labels, v0, n, Vl);
      {
        ScopedPhase t(timers_, "tp_allreduce");
        tp_.allreduce_sum(se, size_t(n), Traffic::TensorParallel);
        tp_.allreduce_sum(target, size_t(n), Traffic::TensorParallel);
      }
      ops_.cross_entropy_loss_sum(loss_sum_.data(), mx, se, target, n);
      if (training) ops_.cross_entropy_backward_inplace(logits, mx, se, chunk_labels, v0, mb.grad_scale, n, Vl);
    }
    if (!training) continue;
    lp(logits, n * Vl);
    const TensorRef dlnf = acts.dlnf.ref() + r0 * C;
    ops_.linear_backward(dlnf, grads_.data() + pl.head_weight, nullptr, logits, lnf, P + pl.head_weight, n, C, Vl,
                         false, opt_.precision);
    lp(dlnf, n * C);
  }
}

void GptStage::backward(StageActivations& acts, const MicroBatch& mb, const float* dx_out, float* dx_in,
                        const std::function<void(int64_t)>& grads_final, int chunk) {
  OCC_CHECK(chunk >= 0 && chunk < layout_.vp_size, "internal: model chunk {} of {}", chunk, layout_.vp_size);
  const int first_layer = chunk * chunk_layers_;
  auto report = [&](int64_t offset) {
    if (grads_final) grads_final(offset);
  };
  const int64_t N = int64_t(mb.B) * mb.T, C = cfg_.hidden_size;
  const int64_t n = stream_rows(N), r0 = stream_row0(N);  // the residual stream's rows here
  const ConstTensorRef P = weights();
  float* G = grads_.data();
  const auto& pl = params_layout_;
  d_resid_.resize(size_t(n * C));
  d_ln_.resize(size_t(N * C));
  const TensorRef dresid = d_resid_.ref();

  if (layout_.holds_head(chunk)) {
    // The head's gradients came with the loss in forward: d loss / d lnf is in
    // acts.dlnf (this rank's vocabulary part; reduced here, over this rank's rows when sequence parallel).
    const TensorRef dlnf = leave_tp_region(acts.dlnf.ref(), sp_norm_rows_, N);
    ops_.fill(dresid, 0.0f, n * C);
    block_.norm_backward(dresid, G + pl.final_ln_w, grad(pl.final_ln_b), dlnf, acts.output.ref(), P + pl.final_ln_w,
                         stats(acts.lnf_mean, acts.lnf_rstd), n);
    lp(dresid, n * C);
    if (sp() && mb.last_backward)
      sp_->sum_partial_grads({{grad(pl.final_ln_w), C}, {grad(pl.final_ln_b), C}});
    report(pl.final_ln_w);
  } else {
    ops_.copy(dresid, dx_out + r0 * C, n * C);  // rounded as forward rounds a received message
    lp(dresid, n * C);
  }

  for (int l = chunk_layers_ - 1; l >= 0; --l) {
    const ConstTensorRef input = acts.layers[size_t(l)].input.ref();
    if (opt_.recompute == Recompute::Full) {
      // Rebuild the layer's activations from its input (same kernels, same dropout keys).
      recompute_out_.resize(size_t(N * C));
      layer_forward(first_layer + l, input, recompute_layer_, recompute_out_.ref(), mb, true);
    }
    layer_backward(first_layer + l, input, layer_work(acts, l), dresid, mb);
    if (sp() && mb.last_backward) {
      const LayerParams& w = pl.layer(first_layer + l);
      sp_->sum_partial_grads({{grad(w.ln1_w), C}, {grad(w.ln1_b), C}, {grad(w.ln2_w), C}, {grad(w.ln2_b), C},
                              {grad(w.proj_b), C}, {grad(w.fcproj_b), C}});
    }
    report(pl.layer(first_layer + l).ln1_w);
  }

  if (layout_.holds_embedding(chunk)) {
    const int64_t Vl = cfg_.padded_vocab_size() / layout_.tp_size, v0 = layout_.tp_rank * Vl;
    // The embedding's TP all-reduce has an identity backward: every rank already holds the full gradient.
    // Sequence parallel: its reduce-scatter's backward all-gathers the rows (the embedding's
    // vocabulary part sees every token), so the position gradient is whole on every rank too.
    ops_.dropout_inplace(
        dresid, {make_key(seed_, mb.iteration, 0, kEmbeddingDropout), cfg_.hidden_dropout, mb.sample_base, r0}, n,
        mb.T, C);
    lp(dresid, n * C);
    TensorRef demb = dresid;
    if (sp()) {
      sp_->all_gather(d_ln_.ref(), dresid, n * C);
      demb = d_ln_.ref();
    }
    if (cfg_.learned_positions()) ops_.position_backward(G + pl.position_embedding, demb, N, mb.T, C);
    ops_.embedding_backward(G + pl.word_embedding, demb, uploaded_ids(acts.tokens, mb.inputs), v0, Vl, N, C);
    report(0);
  } else {
    ops_.copy(dx_in + r0 * C, dresid, n * C);  // sequence parallel: the rows the exchange sends
  }
}

}  // namespace occ
