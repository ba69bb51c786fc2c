#include "model/params.h"

#include <algorithm>
#include <cmath>

#include "core/normal_fill.h"
#include "core/rng.h"

namespace occ {

namespace {
uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}
}  // namespace

int64_t ParamTensor::global_index(int64_t i, int tp_rank) const {
  switch (split) {
    case TpSplit::None: return i;
    case TpSplit::Dim0: return int64_t(tp_rank) * numel + i;  // rows are contiguous
    case TpSplit::Dim1: {
      int64_t r = i / shape[1], c = i % shape[1];
      return r * full_shape[1] + int64_t(tp_rank) * shape[1] + c;
    }
    case TpSplit::Dim0Halves: {
      const int64_t cols = numel / shape[0], half = shape[0] / 2, full_half = full_shape[0] / 2;
      const int64_t r = i / cols, c = i % cols;
      const int64_t row = r < half ? int64_t(tp_rank) * half + r : full_half + int64_t(tp_rank) * half + (r - half);
      return row * cols + c;
    }
  }
  return i;
}

int64_t ParamLayout::add(const std::string& name, std::vector<int64_t> full_shape, TpSplit split, InitKind init,
                         float std, bool weight_decay) {
  ParamTensor t;
  t.name = name;
  t.full_shape = full_shape;
  t.shape = full_shape;
  t.split = split;
  if (split == TpSplit::Dim0 || split == TpSplit::Dim0Halves) t.shape[0] /= layout_.tp_size;
  if (split == TpSplit::Dim1) t.shape[1] /= layout_.tp_size;
  t.numel = 1;
  for (auto d : t.shape) t.numel *= d;
  t.offset = total_;
  t.init = init;
  t.init_std = std;
  t.weight_decay = weight_decay;
  t.counts_in_norm = split != TpSplit::None || layout_.tp_rank == 0;
  t.init_key = fnv1a(name);
  total_ += t.numel;
  tensors_.push_back(t);
  return t.offset;
}

ParamLayout::ParamLayout(const GptConfig& cfg, const ParallelLayout& layout) : cfg_(cfg), layout_(layout) {
  const int64_t C = cfg.hidden_size, F = cfg.ffn_hidden_size(), V = cfg.padded_vocab_size();
  const int64_t QKV = cfg.qkv_size(), FC = cfg.mlp_fc_size();
  const float std = cfg.init_method_std;
  const float out_std = std / std::sqrt(2.0f * float(cfg.num_layers));
  const auto N = InitKind::Normal, Z = InitKind::Zeros, O = InitKind::Ones;
  const auto none = TpSplit::None, rows = TpSplit::Dim0, cols = TpSplit::Dim1;
  // SwiGLU's packed gate and up projections: each rank holds matching slices of both.
  const auto fc_rows = cfg.swiglu ? TpSplit::Dim0Halves : rows;
  const bool layernorm = cfg.normalization == Normalization::LayerNorm, bias = cfg.add_bias_linear;
  const bool tied = cfg.tied_embeddings();
  // A norm's weight, and its bias with LayerNorm (RMSNorm has none).
  auto norm = [&](const std::string& name, int64_t& w, int64_t& b) {
    w = add(name + ".weight", {C}, none, O, 0, false);
    if (layernorm) b = add(name + ".bias", {C}, none, Z, 0, false);
  };
  auto linear_bias = [&](const std::string& name, int64_t size, TpSplit split) {
    return bias ? add(name, {size}, split, Z, 0, false) : int64_t(-1);
  };

  if (layout.first_stage()) {
    word_embedding = add("embedding.word_embeddings.weight", {V, C}, rows, N, std, true);
    tensors_.back().word_embedding = tied;
    if (cfg.learned_positions())
      position_embedding = add("embedding.position_embeddings.weight", {cfg.max_position_embeddings, C}, none, N,
                               std, true);
  }
  // The chunks' layers in model order, so the flat buffer runs from the
  // embedding up to the head and a backward finalises it from the top down.
  for (int chunk = 0; chunk < layout.vp_size; ++chunk) {
    const LayerRange range = chunk_layers(cfg.num_layers, layout, chunk);
    for (int l = range.begin; l < range.end; ++l) {
      const std::string p = "layers." + std::to_string(l) + ".";
      LayerParams lp;
      norm(p + "input_layernorm", lp.ln1_w, lp.ln1_b);
      // QKV rows are ordered per query group [q of the group's heads | k | v]
      // [head_dim] (Megatron; without GQA a group is one head: [q|k|v] per
      // head), so a TP shard is a contiguous block of whole query groups.
      lp.qkv_w = add(p + "attention.query_key_value.weight", {QKV, C}, rows, N, std, true);
      lp.qkv_b = linear_bias(p + "attention.query_key_value.bias", QKV, rows);
      lp.proj_w = add(p + "attention.dense.weight", {C, C}, cols, N, out_std, true);
      lp.proj_b = linear_bias(p + "attention.dense.bias", C, none);
      norm(p + "post_attention_layernorm", lp.ln2_w, lp.ln2_b);
      // With --swiglu: [gate; up] rows, F each.
      lp.fc_w = add(p + "mlp.dense_h_to_4h.weight", {FC, C}, fc_rows, N, std, true);
      lp.fc_b = linear_bias(p + "mlp.dense_h_to_4h.bias", FC, fc_rows);
      lp.fcproj_w = add(p + "mlp.dense_4h_to_h.weight", {C, F}, cols, N, out_std, true);
      lp.fcproj_b = linear_bias(p + "mlp.dense_4h_to_h.bias", C, none);
      layers_.push_back(lp);
      layer_index_.push_back(l);
    }
  }
  if (layout.last_stage()) {
    norm("final_layernorm", final_ln_w, final_ln_b);
    if (!tied) {
      // Megatron's untied output layer: vocab-parallel like the embedding.
      head_weight = add("output_layer.weight", {V, C}, rows, N, std, true);
    } else if (layout.first_stage()) {
      head_weight = word_embedding;
    } else {
      // The last stage's copy of the tied embedding: same init key, so both
      // copies start identical; its gradient is synchronised, not its norm.
      head_weight = add("lm_head.word_embeddings.weight", {V, C}, rows, N, std, true);
      tensors_.back().word_embedding = true;
      tensors_.back().counts_in_norm = false;
      tensors_.back().init_key = fnv1a("embedding.word_embeddings.weight");
    }
  }
}

const ParamTensor& ParamLayout::find(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return t;
  fail("no parameter named '{}' on this rank", name);
}

void ParamLayout::initialize(float* params, uint64_t seed) const {
  // Every normal tensor as pieces of consecutive global indices (a whole shard
  // split by rows, or one row of a column split), cut to at most kPiece values
  // so that the run's threads share the work evenly.
  constexpr int64_t kPiece = int64_t(1) << 15;
  struct Piece {
    float* dst;
    uint64_t key, first;
    int64_t n;
    float std;
  };
  std::vector<Piece> pieces;
  for (const auto& t : tensors_) {
    float* p = params + t.offset;
    if (t.init != InitKind::Normal) {
      std::fill(p, p + t.numel, t.init == InitKind::Ones ? 1.0f : 0.0f);
      continue;
    }
    const uint64_t key = make_key(seed, t.init_key);
    // A row of the shard is consecutive in the full tensor for every split;
    // the whole shard is, unless its columns are split or it holds two halves.
    const bool by_rows = t.split == TpSplit::Dim1 || t.split == TpSplit::Dim0Halves;
    const int64_t run = by_rows ? t.numel / t.rows() : t.numel;
    for (int64_t begin = 0; begin < t.numel; begin += run)
      for (int64_t at = begin; at < begin + run; at += kPiece)
        pieces.push_back({p + at, key, uint64_t(t.global_index(at, layout_.tp_rank)),
                          std::min(kPiece, begin + run - at), t.init_std});
  }
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t i = 0; i < int64_t(pieces.size()); ++i) {
    const Piece& piece = pieces[size_t(i)];
    normal_fill(piece.dst, piece.n, piece.key, piece.first, piece.std);
  }
}

}  // namespace occ
