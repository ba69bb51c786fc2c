#include "model/config.h"

namespace occ {

void GptConfig::validate(const ParallelLayout& l) const {
  OCC_CHECK(num_layers >= 1, "--num-layers must be >= 1 (got {})", num_layers);
  OCC_CHECK(hidden_size >= 1 && num_attention_heads >= 1, "--hidden-size and --num-attention-heads must be >= 1");
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
  OCC_CHECK(padded_vocab_size() % l.tp_size == 0,
            "padded vocabulary {} is not divisible by --tensor-model-parallel-size {}; set "
            "--make-vocab-size-divisible-by to a multiple of {}",
            padded_vocab_size(), l.tp_size, l.tp_size);
}

int64_t GptConfig::num_parameters() const {
  int64_t C = hidden_size, V = padded_vocab_size(), F = ffn_hidden_size();
  int64_t per_layer = 2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C + (F * C + F) + (C * F + C);
  return V * C + int64_t(max_position_embeddings) * C + num_layers * per_layer + 2 * C;
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
