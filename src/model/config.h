#pragma once
// GPT model hyper-parameters (Megatron names) and their validation.
#include <cstdint>
#include <string>

#include "core/layout.h"

namespace occ {

// What backward recomputes instead of keeping from forward (Megatron's
// --recompute-activations / --recompute-granularity). Recomputation replays the
// same kernels on the same inputs with the same dropout keys, so results are
// bit-identical to keeping the activations.
enum class Recompute {
  None,
  Selective,  // attention's softmax probabilities (the B x H x T x T tensors)
  Full,       // everything inside a transformer layer but its input
};
Recompute parse_recompute(const std::string& granularity);  // "selective" | "full"
const char* recompute_name(Recompute r);

// Megatron's --normalization: LayerNorm (GPT-2) or RMSNorm (Llama: x / rms(x) * w,
// no mean subtraction, no bias).
enum class Normalization { LayerNorm, RMSNorm };
Normalization parse_normalization(const std::string& name);  // "LayerNorm" | "RMSNorm"
const char* normalization_name(Normalization n);
// Megatron's --position-embedding-type: learned absolute positions added to the
// embedding (GPT-2), or rotary embeddings applied to q and k in every layer (Llama).
enum class PositionEmbedding { LearnedAbsolute, Rope };
PositionEmbedding parse_position_embedding(const std::string& name);  // "learned_absolute" | "rope"
const char* position_embedding_name(PositionEmbedding p);

struct GptConfig {
  int num_layers = 4;
  int hidden_size = 128;
  int num_attention_heads = 4;
  int seq_length = 128;
  int max_position_embeddings = 128;
  int vocab_size = 0;                   // tokenizer's vocabulary
  int make_vocab_size_divisible_by = 128;
  float hidden_dropout = 0.1f;
  float attention_dropout = 0.1f;
  float init_method_std = 0.02f;
  // ---- the architecture's variants (Megatron's flags; the defaults are GPT-2) ----
  Normalization normalization = Normalization::LayerNorm;  // --normalization
  float norm_epsilon = 1e-5f;                              // --norm-epsilon
  bool swiglu = false;                                     // --swiglu: down(silu(gate x) * up x)
  int ffn_hidden = 0;                                      // --ffn-hidden-size; 0: ffn_hidden_size()'s default
  PositionEmbedding position_embedding = PositionEmbedding::LearnedAbsolute;  // --position-embedding-type
  float rotary_base = 10000.0f;                            // --rotary-base (Hugging Face's rope_theta)
  float rotary_percent = 1.0f;                             // --rotary-percent: share of a head's dims rotated
  bool group_query_attention = false;                      // --group-query-attention
  int num_query_groups = 1;                                // --num-query-groups (with it; Megatron's default 1)
  bool untie_embeddings_and_output_weights = false;        // --untie-embeddings-and-output-weights
  bool add_bias_linear = true;                             // false: --disable-bias-linear

  int head_dim() const { return hidden_size / num_attention_heads; }
  // Key/value heads: one per query group with grouped-query attention, else one per head.
  int kv_heads() const { return group_query_attention ? num_query_groups : num_attention_heads; }
  // Rows of the fused QKV weight: per query group [q of its heads | k | v] (Megatron).
  int qkv_size() const { return (num_attention_heads + 2 * kv_heads()) * head_dim(); }
  // The MLP's inner width. Megatron's default: 4h, or with --swiglu int(8h/3 / 64) * 64
  // (two input projections of that width keep the parameters near the 4h MLP's;
  // a multiple of 64), which is 0 below --hidden-size 24 (validate() then asks for it).
  int ffn_hidden_size() const {
    if (ffn_hidden > 0) return ffn_hidden;
    return swiglu ? int(double(4 * hidden_size) * 2.0 / 3.0 / 64.0) * 64 : 4 * hidden_size;
  }
  // Rows of the MLP's first weight: SwiGLU's gate and up projections are one weight.
  int mlp_fc_size() const { return swiglu ? 2 * ffn_hidden_size() : ffn_hidden_size(); }
  // Dimensions of each head that RoPE rotates (Megatron: int(kv_channels * rotary_percent)).
  int rotary_dim() const { return int(float(head_dim()) * rotary_percent); }
  bool learned_positions() const { return position_embedding == PositionEmbedding::LearnedAbsolute; }
  bool tied_embeddings() const { return !untie_embeddings_and_output_weights; }
  // Weights of one layer's matrices (QKV, attention output, MLP): a token's forward
  // multiplies each once (2 FLOPs per weight). GPT-2: 12 h^2.
  int64_t layer_matrix_params() const;
  // Padded to a multiple of make_vocab_size_divisible_by, independent of TP so
  // that every layout trains the same model; TP must divide the result.
  int padded_vocab_size() const {
    int m = make_vocab_size_divisible_by;
    return (vocab_size + m - 1) / m * m;
  }
  // Throws occ::Error naming the first inconsistency and how to fix it.
  void validate(const ParallelLayout& layout) const;
  // The part of validate() for the Llama-family variants.
  void validate_architecture(const ParallelLayout& layout) const;
  // Parameters of the whole model (a tied embedding counted once).
  int64_t num_parameters() const;
  // One line naming the architecture's variants, e.g. "RMSNorm, SwiGLU 344, RoPE (base 10000), GQA 4 heads
  // in 2 groups, untied embeddings, no linear biases" (GPT-2: "LayerNorm, GeLU 4h, learned positions, ...").
  std::string describe_architecture() const;
};

}  // namespace occ
