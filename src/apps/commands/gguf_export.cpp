// GGUF for llama.cpp from a merged checkpoint (gguf_export.h).
#include "apps/commands/gguf_export.h"

#include <fmt/format.h>

#include "core/error.h"
#include "data/gpt2_bpe_tokenizer.h"
#include "data/sentencepiece_tokenizer.h"

namespace occ::cmd {

namespace {

const MergedTensor& tensor(const std::map<std::string, MergedTensor>& full, const std::string& name) {
  auto it = full.find(name);
  OCC_CHECK(it != full.end(), "internal: merged model lacks {}", name);
  return it->second;
}

// Refuses what llama.cpp's architecture `arch` cannot hold: field = have, it needs `need`.
void require(bool ok, const char* arch, const char* field, const std::string& have, const std::string& need) {
  OCC_CHECK(ok, "--gguf: llama.cpp's architecture '{}' cannot hold this model: {} = {} ({} needs {})", arch, field,
            have, arch, need);
}

// The rows `rows` of a [*, cols] tensor (cols 1: a vector), as a new tensor.
MergedTensor take_rows(const MergedTensor& t, const std::vector<int64_t>& rows) {
  const int64_t cols = t.shape.size() > 1 ? t.shape[1] : 1;
  MergedTensor out;
  out.shape = {int64_t(rows.size())};
  if (t.shape.size() > 1) out.shape.push_back(cols);
  out.data.resize(rows.size() * size_t(cols));
  for (size_t i = 0; i < rows.size(); ++i)
    std::copy_n(t.data.begin() + rows[i] * cols, cols, out.data.begin() + int64_t(i) * cols);
  return out;
}

// RoPE's pairing, per head of D rows: file row h*D + 2i + s <- row h*D + s*D/2 + i.
std::vector<int64_t> rope_pairs(const std::vector<int64_t>& rows, int64_t heads, int64_t D) {
  std::vector<int64_t> out(rows.size());
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < D / 2; ++i)
      for (int64_t s = 0; s < 2; ++s) out[size_t(h * D + 2 * i + s)] = rows[size_t(h * D + s * D / 2 + i)];
  return out;
}

class Builder {
 public:
  Builder(GgufWriter& w, GgmlType type, GgufSummary& summary) : w_(w), type_(type), summary_(summary) {}
  // Vectors (norms, biases) stay f32, as llama.cpp's converter keeps them; matrices take the chosen type.
  void add(const std::string& name, const MergedTensor& t) {
    GgmlType type = t.shape.size() == 1 ? GgmlType::F32 : type_;
    if (type == GgmlType::Q8_0 && t.shape.back() % kQ8BlockSize != 0) {
      type = GgmlType::F16;
      ++summary_.fallback_f16;
    }
    w_.add_tensor(name, t.data, t.shape, type);
  }

 private:
  GgufWriter& w_;
  GgmlType type_;
  GgufSummary& summary_;
};

uint32_t file_type(GgmlType t) {  // llama.cpp's llama_ftype
  switch (t) {
    case GgmlType::F32: return 0;
    case GgmlType::F16: return 1;
    case GgmlType::Q8_0: return 7;
    case GgmlType::BF16: return 32;
  }
  return 0;
}

constexpr int32_t kNormal = 1, kControl = 3, kUnused = 5;

// The run's tokenizer as tokenizer.ggml.*; `padded` tokens in all (the extra ones unused).
void add_tokenizer(GgufWriter& w, const GptConfig& m, const TokenizerSpec& spec) {
  OCC_CHECK(spec.given(), "--gguf: the checkpoint does not name its tokenizer; pass --tokenizer-model (or "
                          "--tokenizer-type GPT2BPETokenizer with --vocab-file and --merge-file)");
  const std::unique_ptr<Tokenizer> tok = load_tokenizer(spec);
  OCC_CHECK(tok->vocab_size() == m.vocab_size,
            "--gguf: tokenizer {} has {} tokens but the model was trained with {}; pass the run's tokenizer",
            tok->describe(), tok->vocab_size(), m.vocab_size);
  const int V = m.vocab_size, Vp = m.padded_vocab_size();
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<float> scores;
  auto pad = [&] {
    for (int id = V; id < Vp; ++id) {
      tokens.push_back(fmt::format("[PAD{}]", id));
      types.push_back(kUnused);
      scores.push_back(-1e9f);
    }
  };
  if (const auto* sp = dynamic_cast<const SentencePieceTokenizer*>(tok.get())) {
    for (const auto& p : sp->pieces()) {
      tokens.push_back(p.text);
      scores.push_back(p.score);
      types.push_back(int32_t(p.kind));
    }
    pad();
    w.add_string("tokenizer.ggml.model", "llama");
    w.add_strings("tokenizer.ggml.tokens", tokens);
    w.add_f32s("tokenizer.ggml.scores", scores);
    w.add_i32s("tokenizer.ggml.token_type", types);
    // No bos in our trained models: llama.cpp needs an id, the eos serves, never added.
    w.add_u32("tokenizer.ggml.bos_token_id", uint32_t(sp->bos_id() >= 0 ? sp->bos_id() : sp->eod_id()));
    w.add_u32("tokenizer.ggml.eos_token_id", uint32_t(sp->eod_id()));
    w.add_u32("tokenizer.ggml.unknown_token_id", uint32_t(sp->unk_id()));
    w.add_bool("tokenizer.ggml.add_space_prefix", sp->adds_dummy_prefix());
  } else {
    const auto* bpe = dynamic_cast<const Gpt2BpeTokenizer*>(tok.get());
    OCC_CHECK(bpe, "internal: unknown tokenizer {}", tok->describe());
    for (int id = 0; id < V; ++id) {
      tokens.push_back(bpe->symbols()[size_t(id)]);
      types.push_back(id == bpe->eod_id() ? kControl : kNormal);
    }
    pad();
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string("tokenizer.ggml.pre", "gpt-2");
    w.add_strings("tokenizer.ggml.tokens", tokens);
    w.add_i32s("tokenizer.ggml.token_type", types);
    w.add_strings("tokenizer.ggml.merges", bpe->merges());
    w.add_u32("tokenizer.ggml.bos_token_id", uint32_t(bpe->eod_id()));
    w.add_u32("tokenizer.ggml.eos_token_id", uint32_t(bpe->eod_id()));
  }
  w.add_bool("tokenizer.ggml.add_bos_token", false);
  w.add_bool("tokenizer.ggml.add_eos_token", false);
}

void add_llama(GgufWriter& w, Builder& b, const GptConfig& m, const std::map<std::string, MergedTensor>& full) {
  const char* arch = "llama";
  require(m.rotary_dim() == m.head_dim(), arch, "rotary_percent", fmt::format("{:g}", m.rotary_percent),
          "1: RoPE on whole heads");
  require(m.head_dim() % 2 == 0, arch, "head size", std::to_string(m.head_dim()), "an even head size");
  const int64_t H = m.num_attention_heads, G = m.kv_heads(), D = m.head_dim(), F = m.ffn_hidden_size(), r = H / G;
  w.add_u32("llama.context_length", uint32_t(m.max_position_embeddings));
  w.add_u32("llama.embedding_length", uint32_t(m.hidden_size));
  w.add_u32("llama.block_count", uint32_t(m.num_layers));
  w.add_u32("llama.feed_forward_length", uint32_t(F));
  w.add_u32("llama.attention.head_count", uint32_t(H));
  w.add_u32("llama.attention.head_count_kv", uint32_t(G));
  w.add_f32("llama.attention.layer_norm_rms_epsilon", m.norm_epsilon);
  w.add_f32("llama.rope.freq_base", m.rotary_base);
  w.add_u32("llama.rope.dimension_count", uint32_t(D));
  w.add_u32("llama.vocab_size", uint32_t(m.padded_vocab_size()));
  // Our fused QKV rows per query group g: [q of its r heads | k | v], D rows each.
  std::vector<int64_t> q_rows, k_rows, v_rows, gate_rows, up_rows;
  for (int64_t h = 0; h < H; ++h)
    for (int64_t d = 0; d < D; ++d) q_rows.push_back(((h / r) * (r + 2) + h % r) * D + d);
  for (int64_t g = 0; g < G; ++g)
    for (int64_t d = 0; d < D; ++d) {
      k_rows.push_back((g * (r + 2) + r) * D + d);
      v_rows.push_back((g * (r + 2) + r + 1) * D + d);
    }
  q_rows = rope_pairs(q_rows, H, D);
  k_rows = rope_pairs(k_rows, G, D);
  for (int64_t f = 0; f < F; ++f) gate_rows.push_back(f), up_rows.push_back(F + f);
  auto get = [&](const std::string& name) -> const MergedTensor& { return tensor(full, name); };
  b.add("token_embd.weight", get("embedding.word_embeddings.weight"));
  for (int l = 0; l < m.num_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".", k = "blk." + std::to_string(l) + ".";
    b.add(k + "attn_norm.weight", get(p + "input_layernorm.weight"));
    const MergedTensor& qkv = get(p + "attention.query_key_value.weight");
    b.add(k + "attn_q.weight", take_rows(qkv, q_rows));
    b.add(k + "attn_k.weight", take_rows(qkv, k_rows));
    b.add(k + "attn_v.weight", take_rows(qkv, v_rows));
    b.add(k + "attn_output.weight", get(p + "attention.dense.weight"));
    b.add(k + "ffn_norm.weight", get(p + "post_attention_layernorm.weight"));
    const MergedTensor& fc = get(p + "mlp.dense_h_to_4h.weight");
    b.add(k + "ffn_gate.weight", take_rows(fc, gate_rows));
    b.add(k + "ffn_up.weight", take_rows(fc, up_rows));
    b.add(k + "ffn_down.weight", get(p + "mlp.dense_4h_to_h.weight"));
    if (m.add_bias_linear) {
      const MergedTensor& qkv_b = get(p + "attention.query_key_value.bias");
      b.add(k + "attn_q.bias", take_rows(qkv_b, q_rows));
      b.add(k + "attn_k.bias", take_rows(qkv_b, k_rows));
      b.add(k + "attn_v.bias", take_rows(qkv_b, v_rows));
      b.add(k + "attn_output.bias", get(p + "attention.dense.bias"));
      const MergedTensor& fc_b = get(p + "mlp.dense_h_to_4h.bias");
      b.add(k + "ffn_gate.bias", take_rows(fc_b, gate_rows));
      b.add(k + "ffn_up.bias", take_rows(fc_b, up_rows));
      b.add(k + "ffn_down.bias", get(p + "mlp.dense_4h_to_h.bias"));
    }
  }
  b.add("output_norm.weight", get("final_layernorm.weight"));
  // Tied: llama.cpp multiplies by token_embd when output.weight is absent.
  if (!m.tied_embeddings()) b.add("output.weight", get("output_layer.weight"));
}

void add_gpt2(GgufWriter& w, Builder& b, const GptConfig& m, const std::map<std::string, MergedTensor>& full) {
  const int64_t C = m.hidden_size, D = m.head_dim(), F = m.ffn_hidden_size();
  w.add_u32("gpt2.context_length", uint32_t(m.max_position_embeddings));
  w.add_u32("gpt2.embedding_length", uint32_t(C));
  w.add_u32("gpt2.block_count", uint32_t(m.num_layers));
  w.add_u32("gpt2.feed_forward_length", uint32_t(F));
  w.add_u32("gpt2.attention.head_count", uint32_t(m.num_attention_heads));
  w.add_f32("gpt2.attention.layer_norm_epsilon", m.norm_epsilon);
  w.add_u32("gpt2.vocab_size", uint32_t(m.padded_vocab_size()));
  // attn_qkv rows are [Q; K; V], each [head][D]; ours [head][q|k|v][D].
  std::vector<int64_t> qkv_rows;
  for (int64_t o = 0; o < 3 * C; ++o) {
    const int64_t j = o / C, h = (o % C) / D, d = o % D;
    qkv_rows.push_back(h * 3 * D + j * D + d);
  }
  auto get = [&](const std::string& name) -> const MergedTensor& { return tensor(full, name); };
  b.add("token_embd.weight", get("embedding.word_embeddings.weight"));
  b.add("position_embd.weight", get("embedding.position_embeddings.weight"));
  for (int l = 0; l < m.num_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".", k = "blk." + std::to_string(l) + ".";
    b.add(k + "attn_norm.weight", get(p + "input_layernorm.weight"));
    b.add(k + "attn_norm.bias", get(p + "input_layernorm.bias"));
    b.add(k + "attn_qkv.weight", take_rows(get(p + "attention.query_key_value.weight"), qkv_rows));
    b.add(k + "attn_qkv.bias", take_rows(get(p + "attention.query_key_value.bias"), qkv_rows));
    b.add(k + "attn_output.weight", get(p + "attention.dense.weight"));
    b.add(k + "attn_output.bias", get(p + "attention.dense.bias"));
    b.add(k + "ffn_norm.weight", get(p + "post_attention_layernorm.weight"));
    b.add(k + "ffn_norm.bias", get(p + "post_attention_layernorm.bias"));
    b.add(k + "ffn_up.weight", get(p + "mlp.dense_h_to_4h.weight"));
    b.add(k + "ffn_up.bias", get(p + "mlp.dense_h_to_4h.bias"));
    b.add(k + "ffn_down.weight", get(p + "mlp.dense_4h_to_h.weight"));
    b.add(k + "ffn_down.bias", get(p + "mlp.dense_4h_to_h.bias"));
  }
  b.add("output_norm.weight", get("final_layernorm.weight"));
  b.add("output_norm.bias", get("final_layernorm.bias"));
  // Untied: llama.cpp's GPT-2 reads output.weight when present (src/models/gpt2.cpp), token_embd otherwise.
  if (!m.tied_embeddings()) b.add("output.weight", get("output_layer.weight"));
}

}  // namespace

GgufSummary write_gguf(const std::string& path, const GptConfig& m, const std::map<std::string, MergedTensor>& full,
                       int64_t iteration, const TokenizerSpec& tokenizer, GgmlType type) {
  GgufSummary summary;
  const bool llama = m.normalization == Normalization::RMSNorm;
  summary.architecture = llama ? "llama" : "gpt2";
  const char* arch = llama ? "llama" : "gpt2";
  // Each architecture's fixed parts; the other family's flags name the way out.
  if (llama) {
    require(m.swiglu, arch, "swiglu", "false", "--swiglu");
    require(!m.learned_positions(), arch, "position_embedding_type", position_embedding_name(m.position_embedding),
            "rope");
  } else {
    require(!m.swiglu, arch, "swiglu", "true", "a GeLU MLP (or --normalization RMSNorm for 'llama')");
    require(m.learned_positions(), arch, "position_embedding_type", position_embedding_name(m.position_embedding),
            "learned_absolute (or --normalization RMSNorm for 'llama')");
    require(m.kv_heads() == m.num_attention_heads, arch, "num_query_groups", std::to_string(m.kv_heads()),
            "one k/v head per query head");
    require(m.add_bias_linear, arch, "add_bias_linear", "false", "linear biases");
  }
  GgufWriter w;
  w.add_string("general.architecture", arch);
  w.add_string("general.name", fmt::format("optimus-cc iteration {}", iteration));
  w.add_u32("general.file_type", file_type(type));
  w.add_u32("general.quantization_version", 2);
  Builder b(w, type, summary);
  if (llama)
    add_llama(w, b, m, full);
  else
    add_gpt2(w, b, m, full);
  add_tokenizer(w, m, tokenizer);
  summary.tensors = w.tensor_count();
  summary.vocabulary = m.padded_vocab_size();
  w.write(path);
  return summary;
}

}  // namespace occ::cmd
