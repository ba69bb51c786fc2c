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
  float layernorm_epsilon = 1e-5f;

  int head_dim() const { return hidden_size / num_attention_heads; }
  int ffn_hidden_size() const { return 4 * hidden_size; }
  // Padded to a multiple of make_vocab_size_divisible_by, independent of TP so
  // that every layout trains the same model; TP must divide the result.
  int padded_vocab_size() const {
    int m = make_vocab_size_divisible_by;
    return (vocab_size + m - 1) / m * m;
  }
  // Throws occ::Error naming the first inconsistency and how to fix it.
  void validate(const ParallelLayout& layout) const;
  // Parameters of the whole model (tied embedding counted once).
  int64_t num_parameters() const;
};

}  // namespace occ
