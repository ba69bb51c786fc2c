#include "model/kv_decoder.h"

#include <algorithm>

#include "kernels/kernels.h"

namespace occ {

KvCacheDecoder::KvCacheDecoder(GptStage& stage)
    : stage_(stage), block_(stage.ops(), BlockShape::of(stage.config(), 1)), acts_(stage.make_activations()) {
  const GptConfig& m = stage.config();
  OCC_CHECK(stage.device() == Device::Cpu && stage.storage() == Precision::Fp32 && stage.layout().tp_size == 1 &&
                stage.layout().pp_size == 1,
            "internal: the KV-cache decoder runs a single-process fp32 CPU stage");
  const BlockShape& b = block_.shape();
  cache_.assign(size_t(m.num_layers), std::vector<float>(size_t(m.seq_length * b.qkv)));
  if (b.rope) {
    rope_table_.resize(size_t(m.seq_length * b.rotary_dim));
    kernels::rope_table(rope_table_.data(), m.seq_length, b.rotary_dim, double(m.rotary_base));
  }
  const int64_t C = b.C;
  x_.resize(size_t(C)), ln_.resize(size_t(C)), mean_.resize(1), rstd_.resize(1), atty_.resize(size_t(b.attn));
  branch_.resize(size_t(C)), resid_.resize(size_t(C)), fc_.resize(size_t(b.fc)), act_.resize(size_t(b.ffn));
  logits_.resize(size_t(m.padded_vocab_size()));
}

std::vector<float> KvCacheDecoder::prefill(const std::vector<int32_t>& ids) {
  const int64_t n = int64_t(ids.size()), W = block_.shape().qkv;
  OCC_CHECK(n >= 1 && n <= capacity(), "internal: a prefill of {} tokens (context {})", n, capacity());
  MicroBatch mb{ids.data(), nullptr, 1, int(n), 0, 0, 0.0f};
  mb.keep_logits = true;
  stage_.forward(acts_, mb, nullptr, nullptr, false);
  for (size_t l = 0; l < cache_.size(); ++l) {
    const std::vector<float> qkv = acts_.layers[l].qkv.to_host_f32();
    std::copy_n(qkv.begin(), n * W, cache_[l].begin());
  }
  length_ = n;
  return stage_.logits_to_host(acts_);
}

std::vector<float> KvCacheDecoder::step(int32_t token) {
  OCC_CHECK(length_ >= 1 && length_ < capacity(), "internal: a decoding step at position {} (context {})", length_,
            capacity());
  const GptConfig& m = stage_.config();
  const BlockShape& b = block_.shape();
  const ParamLayout& pl = stage_.param_layout();
  kernels::Ops& ops = stage_.ops();
  const float* P = stage_.params().data();
  auto at = [P](int64_t offset) { return offset < 0 ? ConstTensorRef() : ConstTensorRef(P + offset); };
  const int64_t t = length_, C = b.C, Vp = m.padded_vocab_size();
  const kernels::Dropout none{};
  const kernels::AttentionShape one{1, 1, b.heads, b.D, 0, m.num_attention_heads, b.groups};
  const NormStats st{b.layernorm() ? mean_.data() : nullptr, rstd_.data()};

  ops.embedding_forward(x_.data(), &token, P + pl.word_embedding, 0, Vp, 1, C);
  if (m.learned_positions()) ops.position_forward(x_.data(), P + pl.position_embedding + t * C, 1, 1, C);
  for (int l = 0; l < m.num_layers; ++l) {
    const LayerParams& w = pl.layer(l);
    float* row = cache_[size_t(l)].data() + t * b.qkv;  // this position's q, k, v
    block_.norm_forward(ln_.data(), st, x_.data(), P + w.ln1_w, at(w.ln1_b), 1);
    ops.linear_forward(row, ln_.data(), P + w.qkv_w, at(w.qkv_b), 1, C, b.qkv, Precision::Fp32);
    // RoPE at position t: the table read from row t (its sin half stays table_T rows on).
    if (b.rope)
      ops.rope_forward(row, rope_table_.data() + t * (b.rotary_dim / 2), m.seq_length, one, b.rotary_dim);
    kernels::attention_decode(atty_.data(), cache_[size_t(l)].data(), t + 1, one);
    ops.linear_forward(branch_.data(), atty_.data(), P + w.proj_w, nullptr, 1, b.attn, C, Precision::Fp32);
    block_.add_norm_forward(resid_.data(), ln_.data(), st, x_.data(), branch_.data(), at(w.proj_b), none,
                            P + w.ln2_w, at(w.ln2_b), 1, 1, Precision::Fp32);
    block_.mlp_in_forward(fc_.data(), act_.data(), ln_.data(), P + w.fc_w, at(w.fc_b), 1, Precision::Fp32);
    ops.linear_forward(branch_.data(), act_.data(), P + w.fcproj_w, nullptr, 1, b.ffn, C, Precision::Fp32);
    ops.bias_dropout_add_forward(x_.data(), resid_.data(), branch_.data(), at(w.fcproj_b), none, 1, 1, C);
  }
  block_.norm_forward(ln_.data(), st, x_.data(), P + pl.final_ln_w, at(pl.final_ln_b), 1);
  ops.linear_forward(logits_.data(), ln_.data(), P + pl.head_weight, nullptr, 1, C, Vp, Precision::Fp32);
  ++length_;
  return logits_;
}

}  // namespace occ
