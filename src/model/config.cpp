#include "model/config.h"

#include <cmath>

namespace occ {

void GptConfig::validate(const ParallelLayout& l) const {
  OCC_CHECK(num_layers >= 1, "--num-layers must be >= 1 (got {})", num_layers);
  OCC_CHECK(hidden_size >= 1 && num_attention_heads >= 1, "--hidden-size and --num-attention-heads must be >= 1");
  // Widths the 32-bit shapes hold (the MLP's 4 x hidden, SwiGLU's two projections, the padding).
  constexpr int kMaxHidden = (1 << 29) - 1, kMaxFfn = (1 << 30) - 1, kMaxPadding = 1 << 20;
  OCC_CHECK(hidden_size <= kMaxHidden,
            "--hidden-size {} is wider than the engine's 32-bit shapes hold (the MLP is 4 x --hidden-size); the "
            "largest accepted --hidden-size is {}",
            hidden_size, kMaxHidden);
  OCC_CHECK(ffn_hidden <= kMaxFfn, "--ffn-hidden-size {} is wider than the engine's 32-bit shapes hold; the largest "
            "accepted --ffn-hidden-size is {}", ffn_hidden, kMaxFfn);
  OCC_CHECK(make_vocab_size_divisible_by <= kMaxPadding,
            "--make-vocab-size-divisible-by {} is more than any vocabulary needs; the largest accepted is {}",
            make_vocab_size_divisible_by, kMaxPadding);
  OCC_CHECK(hidden_size % num_attention_heads == 0,
            "--hidden-size {} is not divisible by --num-attention-heads {}; pick a head count that divides it",
            hidden_size, num_attention_heads);
  OCC_CHECK(seq_length >= 1, "--seq-length must be >= 1 (got {})", seq_length);
  OCC_CHECK(seq_length <= max_position_embeddings,
            "--seq-length {} exceeds --max-position-embeddings {}; raise --max-position-embeddings or shorten "
            "--seq-length",
            seq_length, max_position_embeddings);
  OCC_CHECK(vocab_size >= 2, "vocabulary size {} is too small; check --tokenizer-model", vocab_size);
  OCC_CHECK(make_vocab_size_divisible_by >= 1, "--make-vocab-size-divisible-by must be >= 1");
  OCC_CHECK(hidden_dropout >= 0 && hidden_dropout < 1, "--hidden-dropout must be in [0, 1) (got {})", hidden_dropout);
  OCC_CHECK(attention_dropout >= 0 && attention_dropout < 1, "--attention-dropout must be in [0, 1) (got {})",
            attention_dropout);
  OCC_CHECK(num_layers % l.pp_size == 0,
            "--num-layers {} is not divisible by --pipeline-model-parallel-size {}; every stage needs the same "
            "number of layers",
            num_layers, l.pp_size);
  OCC_CHECK(l.vp_size >= 1 && num_layers % l.virtual_stages() == 0,
            "--num-layers {} does not split into {} model chunks of {} pipeline stages; give "
            "--num-layers-per-virtual-pipeline-stage a divisor of the layers per stage",
            num_layers, l.vp_size, l.pp_size);
  OCC_CHECK(num_attention_heads % l.tp_size == 0,
            "--num-attention-heads {} is not divisible by --tensor-model-parallel-size {}", num_attention_heads,
            l.tp_size);
  OCC_CHECK(hidden_size % l.tp_size == 0, "--hidden-size {} is not divisible by --tensor-model-parallel-size {}",
            hidden_size, l.tp_size);
  validate_architecture(l);
  OCC_CHECK(padded_vocab_size() % l.tp_size == 0,
            "padded vocabulary {} is not divisible by --tensor-model-parallel-size {}; set "
            "--make-vocab-size-divisible-by to a multiple of {}",
            padded_vocab_size(), l.tp_size, l.tp_size);
}

// Megatron's rules for its Llama-family flags (arguments.py, TransformerConfig).
void GptConfig::validate_architecture(const ParallelLayout& l) const {
  OCC_CHECK(norm_epsilon > 0 && std::isfinite(norm_epsilon), "--norm-epsilon must be > 0 (got {})", norm_epsilon);
  if (group_query_attention) {
    OCC_CHECK(num_query_groups >= 1, "--num-query-groups must be >= 1 (got {})", num_query_groups);
    OCC_CHECK(num_attention_heads % num_query_groups == 0,
              "--num-query-groups {} does not divide --num-attention-heads {}; every query group needs the same "
              "number of heads",
              num_query_groups, num_attention_heads);
  }
  OCC_CHECK(kv_heads() % l.tp_size == 0,
            "--num-query-groups {} is not divisible by --tensor-model-parallel-size {}; each tensor-parallel rank "
            "holds whole query groups (their k/v heads)",
            kv_heads(), l.tp_size);
  OCC_CHECK(ffn_hidden >= 0, "--ffn-hidden-size must be >= 1 (got {})", ffn_hidden);
  OCC_CHECK(ffn_hidden_size() >= 1,
            "--swiglu's default --ffn-hidden-size, int(8 x {} / 3 / 64) x 64 (Megatron's), is 0 for this "
            "--hidden-size; give --ffn-hidden-size",
            hidden_size);
  OCC_CHECK(ffn_hidden_size() % l.tp_size == 0,
            "--ffn-hidden-size {} is not divisible by --tensor-model-parallel-size {}; the MLP's columns are split "
            "evenly",
            ffn_hidden_size(), l.tp_size);
  if (position_embedding == PositionEmbedding::Rope) {
    OCC_CHECK(rotary_base > 0 && std::isfinite(rotary_base), "--rotary-base must be > 0 (got {})", rotary_base);
    OCC_CHECK(rotary_percent > 0 && rotary_percent <= 1, "--rotary-percent must be in (0, 1] (got {})",
              rotary_percent);
    OCC_CHECK(rotary_dim() >= 2 && rotary_dim() % 2 == 0,
              "--rotary-percent {} rotates {} of the head's {} dimensions; RoPE rotates pairs, so it needs an even "
              "number >= 2: adjust --rotary-percent",
              rotary_percent, rotary_dim(), head_dim());
  }
}

int64_t GptConfig::layer_matrix_params() const {
  const int64_t C = hidden_size, F = ffn_hidden_size();
  return C * qkv_size() + C * C + (swiglu ? 3 : 2) * C * F;
}

int64_t GptConfig::num_parameters() const {
  const int64_t C = hidden_size, V = padded_vocab_size();
  const int64_t norms = normalization == Normalization::LayerNorm ? 2 * C : C;  // (weight and bias) per norm
  const int64_t biases = add_bias_linear ? qkv_size() + C + mlp_fc_size() + C : 0;
  const int64_t per_layer = 2 * norms + layer_matrix_params() + biases;
  const int64_t positions = learned_positions() ? int64_t(max_position_embeddings) * C : 0;
  const int64_t output = tied_embeddings() ? 0 : V * C;
  return V * C + positions + num_layers * per_layer + norms + output;
}

std::string GptConfig::describe_architecture() const {
  std::string s = normalization_name(normalization);
  s += swiglu ? fmt::format(", SwiGLU {}", ffn_hidden_size()) : fmt::format(", GeLU MLP {}", ffn_hidden_size());
  s += learned_positions() ? std::string(", learned positions")
                           : fmt::format(", RoPE (base {:g}{})", rotary_base,
                                         rotary_percent < 1 ? fmt::format(", {} of {} dims", rotary_dim(), head_dim())
                                                            : std::string());
  if (kv_heads() != num_attention_heads)
    s += fmt::format(", GQA {} heads in {} groups", num_attention_heads, kv_heads());
  s += tied_embeddings() ? ", tied embeddings" : ", untied embeddings";
  if (!add_bias_linear) s += ", no linear biases";
  return s;
}

Normalization parse_normalization(const std::string& name) {
  if (name == "LayerNorm") return Normalization::LayerNorm;
  if (name == "RMSNorm") return Normalization::RMSNorm;
  fail("--normalization {} is not known; use LayerNorm or RMSNorm", name);
}

const char* normalization_name(Normalization n) { return n == Normalization::RMSNorm ? "RMSNorm" : "LayerNorm"; }

PositionEmbedding parse_position_embedding(const std::string& name) {
  if (name == "learned_absolute") return PositionEmbedding::LearnedAbsolute;
  if (name == "rope") return PositionEmbedding::Rope;
  fail("--position-embedding-type {} is not known; use learned_absolute or rope", name);
}

const char* position_embedding_name(PositionEmbedding p) {
  return p == PositionEmbedding::Rope ? "rope" : "learned_absolute";
}

Recompute parse_recompute(const std::string& granularity) {
  if (granularity == "selective") return Recompute::Selective;
  if (granularity == "full") return Recompute::Full;
  fail("--recompute-granularity {} is not known; use selective (attention only) or full (whole layers)", granularity);
}

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::None: return "none";
    case Recompute::Selective: return "selective";
    case Recompute::Full: return "full";
  }
  return "none";
}

}  // namespace occ
