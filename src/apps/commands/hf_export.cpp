// Hugging Face GPT-2 and Llama directories from a merged checkpoint (hf_export.h).
#include "apps/commands/hf_export.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/safetensors.h"
#include "core/tensor_file.h"
#include "data/sentencepiece_tokenizer.h"

namespace occ::cmd {

namespace {

namespace fs = std::filesystem;

constexpr const char* kWordEmbedding = "embedding.word_embeddings.weight";

// A float as the shortest decimal that reads back as it (1e-5, not 9.99999974e-06).
double decimal(float f) { return std::stod(fmt::format("{}", f)); }

void copy_file(const std::string& flag, const std::string& from, const std::string& to, const char* fix) {
  std::ifstream in(from, std::ios::binary);
  OCC_CHECK(in.good(), "{}: cannot read the run's tokenizer file {}; {}", flag, from, fix);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  write_file_atomic(to, bytes.str());
}

// The tokenizer files Hugging Face's AutoTokenizer loads, and its configuration:
// GPT-2 BPE runs: GPT2Tokenizer's vocab.json and merges.txt (GPT-2's own files, copied);
// SentencePiece runs: LlamaTokenizer's tokenizer.model (the run's model, copied), with
// legacy = true (the text goes to SentencePiece as it is: our ids) and no bos added
// (our models have no bos: the eos, which ends every document, stands in as bos).
void write_hf_tokenizer(const std::string& flag, const std::string& dir, const TokenizerSpec& spec,
                        const Tokenizer& tok, const GptConfig& m) {
  nlohmann::ordered_json config, special;
  if (spec.type == TokenizerType::Gpt2Bpe) {
    const char* fix = "pass --vocab-file and --merge-file where the files are now";
    copy_file(flag, spec.vocab_file, dir + "/vocab.json", fix);
    copy_file(flag, spec.merge_file, dir + "/merges.txt", fix);
    config = {{"tokenizer_class", "GPT2Tokenizer"}, {"model_max_length", m.max_position_embeddings},
              {"bos_token", "<|endoftext|>"},      {"eos_token", "<|endoftext|>"},
              {"unk_token", "<|endoftext|>"},      {"add_prefix_space", false}};
    special = {{"bos_token", "<|endoftext|>"}, {"eos_token", "<|endoftext|>"}, {"unk_token", "<|endoftext|>"}};
  } else {
    const auto& sp = dynamic_cast<const SentencePieceTokenizer&>(tok);
    copy_file(flag, spec.model, dir + "/tokenizer.model", "pass --tokenizer-model where the file is now");
    const auto pieces = sp.pieces();
    const std::string eos = pieces.at(size_t(sp.eod_id())).text, unk = pieces.at(size_t(sp.unk_id())).text;
    const std::string bos = sp.bos_id() >= 0 ? pieces.at(size_t(sp.bos_id())).text : eos;
    config = {{"tokenizer_class", "LlamaTokenizer"},
              {"model_max_length", m.max_position_embeddings},
              {"bos_token", bos},
              {"eos_token", eos},
              {"unk_token", unk},
              {"pad_token", nullptr},
              {"add_bos_token", false},
              {"add_eos_token", false},
              {"add_prefix_space", sp.adds_dummy_prefix()},
              {"legacy", true},
              {"clean_up_tokenization_spaces", false},
              {"spaces_between_special_tokens", false},
              {"sp_model_kwargs", nlohmann::json::object()}};
    special = {{"bos_token", bos}, {"eos_token", eos}, {"unk_token", unk}};
  }
  write_file_atomic(dir + "/tokenizer_config.json", config.dump(2) + "\n");
  write_file_atomic(dir + "/special_tokens_map.json", special.dump(2) + "\n");
}

}  // namespace

std::vector<std::string> hf_file_names(const TokenizerSpec& tokenizer) {
  std::vector<std::string> names{"model.safetensors", "config.json"};
  if (!tokenizer.given()) return names;
  for (const char* name : {"generation_config.json", "tokenizer_config.json", "special_tokens_map.json"})
    names.push_back(name);
  if (tokenizer.type == TokenizerType::Gpt2Bpe) {
    names.push_back("vocab.json");
    names.push_back("merges.txt");
  } else {
    names.push_back("tokenizer.model");
  }
  return names;
}

namespace {

// The merged tensor `name` (the model's own single-process names).
const MergedTensor& merged_tensor(const std::map<std::string, MergedTensor>& full, const std::string& name) {
  auto it = full.find(name);
  OCC_CHECK(it != full.end(), "internal: merged model lacks {}", name);
  return it->second;
}

void make_dir(const std::string& flag, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  OCC_CHECK(!ec, "{} {}: cannot create the directory: {}", flag, dir, ec.message());
}

// Refuses a model the target architecture cannot hold: `field` = `have`, the target needs `need`.
void require_arch(bool ok, const char* flag, const char* target, const char* field, const std::string& have,
                  const std::string& need, const char* instead) {
  OCC_CHECK(ok, "{} writes {}, but the checkpoint's model has {} = {} ({} needs {}){}", flag, target, field, have,
            target, need, instead);
}

// The run's tokenizer (its files are copied), where the checkpoint names one: loadable,
// of the model's vocabulary. Checked before anything is written.
void check_tokenizer(const std::string& flag, const GptConfig& m, const TokenizerSpec& tokenizer) {
  if (!tokenizer.given()) return;
  const std::unique_ptr<Tokenizer> tok = load_tokenizer(tokenizer);  // (also checks the files)
  OCC_CHECK(tok->vocab_size() == m.vocab_size,
            "{}: tokenizer {} has {} tokens but the model was trained with {}; pass the run's tokenizer flags", flag,
            tok->describe(), tok->vocab_size(), m.vocab_size);
}

// The run's tokenizer files, its bos/eos ids in config.json and generation_config.json.
void add_tokenizer(const std::string& flag, const std::string& dir, const GptConfig& m, const TokenizerSpec& tokenizer,
                   nlohmann::ordered_json& config) {
  if (!tokenizer.given()) {
    std::printf("%s: the checkpoint names no tokenizer: no tokenizer files written (pass the run's tokenizer "
                "flags to add them)\n", flag.c_str());
    return;
  }
  const std::unique_ptr<Tokenizer> tok = load_tokenizer(tokenizer);  // (also checks the files)
  OCC_CHECK(tok->vocab_size() == m.vocab_size,
            "{}: tokenizer {} has {} tokens but the model was trained with {}; pass the run's tokenizer flags", flag,
            tok->describe(), tok->vocab_size(), m.vocab_size);
  if (tok->eod_id() >= 0) {
    config["bos_token_id"] = config["eos_token_id"] = tok->eod_id();
    const nlohmann::ordered_json generation = {{"bos_token_id", tok->eod_id()}, {"eos_token_id", tok->eod_id()}};
    write_file_atomic(dir + "/generation_config.json", generation.dump(2) + "\n");
  }
  write_hf_tokenizer(flag, dir, tokenizer, *tok, m);
}

nlohmann::ordered_json optimus_cc_note(const GptConfig& m, int64_t iteration, const TokenizerSpec& tokenizer) {
  return {{"iteration", iteration},
          {"tokenizer_vocab_size", m.vocab_size},
          {"padded_vocab_size", m.padded_vocab_size()},
          {"tokenizer_type", tokenizer_type_name(tokenizer.type)},
          {"architecture", m.describe_architecture()},
          {"note",
           "vocab_size is the padded vocabulary of the trained model; ids >= tokenizer_vocab_size are padding "
           "rows never produced by the tokenizer the run used"}};
}

}  // namespace

void check_hf_gpt2(const GptConfig& m, const TokenizerSpec& tokenizer) {
  const char* flag = "--hf-gpt2";
  const char* llama = "; export it with --hf-llama";
  require_arch(m.normalization == Normalization::LayerNorm, flag, "GPT-2", "normalization",
               normalization_name(m.normalization), "LayerNorm", llama);
  require_arch(!m.swiglu, flag, "GPT-2", "swiglu", "true", "a GeLU MLP", llama);
  require_arch(m.learned_positions(), flag, "GPT-2", "position_embedding_type",
               position_embedding_name(m.position_embedding), "learned_absolute", llama);
  require_arch(m.kv_heads() == m.num_attention_heads, flag, "GPT-2", "num_query_groups", std::to_string(m.kv_heads()),
               "one per head", llama);
  require_arch(m.tied_embeddings(), flag, "GPT-2", "untie_embeddings_and_output_weights", "true", "tied embeddings",
               llama);
  require_arch(m.add_bias_linear, flag, "GPT-2", "add_bias_linear", "false", "linear biases", llama);
  check_tokenizer(flag, m, tokenizer);
}

void write_hf_gpt2(const std::string& dir, const GptConfig& m, const std::map<std::string, MergedTensor>& full,
                   int64_t iteration, const TokenizerSpec& tokenizer) {
  const char* flag = "--hf-gpt2";
  check_hf_gpt2(m, tokenizer);
  make_dir(flag, dir);
  const int64_t C = m.hidden_size, H = m.num_attention_heads, D = m.head_dim(), F = m.ffn_hidden_size();
  auto get = [&](const std::string& name) -> const MergedTensor& { return merged_tensor(full, name); };
  SafetensorsWriter w;
  w.set_metadata("format", "pt");  // what transformers expects of a PyTorch safetensors file
  auto copy = [&](const std::string& hf, const std::string& ours) {
    const MergedTensor& t = get(ours);
    w.add_f32(hf, t.data.data(), t.shape);
  };
  // Linear weight [out, in] (ours, y = x W^T) -> Conv1D weight [in, out] (y = x W).
  auto conv1d = [&](const std::string& hf, const std::string& ours) {
    const MergedTensor& t = get(ours);
    const int64_t out = t.shape[0], in = t.shape[1];
    std::vector<float> tr(size_t(in * out));
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) tr[size_t(i * out + o)] = t.data[size_t(o * in + i)];
    w.add_f32(hf, tr.data(), {in, out});
  };
  copy("wte.weight", kWordEmbedding);
  copy("wpe.weight", "embedding.position_embeddings.weight");
  // Our fused QKV rows are [head][q|k|v][head_dim]; GPT-2's c_attn columns are
  // [q | k | v], each [head][head_dim]. Column o = j*C + h*D + d takes our row
  // h*3D + j*D + d.
  auto qkv_row = [&](int64_t o) {
    const int64_t j = o / C, h = (o % C) / D, d = o % D;
    return h * 3 * D + j * D + d;
  };
  for (int l = 0; l < m.num_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".", h = "h." + std::to_string(l) + ".";
    copy(h + "ln_1.weight", p + "input_layernorm.weight");
    copy(h + "ln_1.bias", p + "input_layernorm.bias");
    {
      const MergedTensor& wq = get(p + "attention.query_key_value.weight");
      const MergedTensor& bq = get(p + "attention.query_key_value.bias");
      std::vector<float> cw(size_t(C * 3 * C)), cb(size_t(3 * C));
      for (int64_t o = 0; o < 3 * C; ++o) {
        const int64_t r = qkv_row(o);
        cb[size_t(o)] = bq.data[size_t(r)];
        for (int64_t i = 0; i < C; ++i) cw[size_t(i * 3 * C + o)] = wq.data[size_t(r * C + i)];
      }
      w.add_f32(h + "attn.c_attn.weight", cw.data(), {C, 3 * C});
      w.add_f32(h + "attn.c_attn.bias", cb.data(), {3 * C});
    }
    conv1d(h + "attn.c_proj.weight", p + "attention.dense.weight");
    copy(h + "attn.c_proj.bias", p + "attention.dense.bias");
    copy(h + "ln_2.weight", p + "post_attention_layernorm.weight");
    copy(h + "ln_2.bias", p + "post_attention_layernorm.bias");
    conv1d(h + "mlp.c_fc.weight", p + "mlp.dense_h_to_4h.weight");
    copy(h + "mlp.c_fc.bias", p + "mlp.dense_h_to_4h.bias");
    conv1d(h + "mlp.c_proj.weight", p + "mlp.dense_4h_to_h.weight");
    copy(h + "mlp.c_proj.bias", p + "mlp.dense_4h_to_h.bias");
  }
  copy("ln_f.weight", "final_layernorm.weight");
  copy("ln_f.bias", "final_layernorm.bias");
  w.write(dir + "/model.safetensors");

  const nlohmann::ordered_json config = {
      {"architectures", {"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      // The padded vocabulary (rows of wte): ids >= tokenizer_vocab_size are
      // padding that the tokenizer never produces; mask them when sampling.
      {"vocab_size", m.padded_vocab_size()},
      {"n_positions", m.max_position_embeddings},
      {"n_ctx", m.max_position_embeddings},
      {"n_embd", C},
      {"n_layer", m.num_layers},
      {"n_head", H},
      {"n_inner", F},
      {"activation_function", "gelu_new"},
      {"layer_norm_epsilon", decimal(m.norm_epsilon)},
      {"resid_pdrop", decimal(m.hidden_dropout)},
      {"embd_pdrop", decimal(m.hidden_dropout)},
      {"attn_pdrop", decimal(m.attention_dropout)},
      {"initializer_range", decimal(m.init_method_std)},
      {"scale_attn_weights", true},
      {"scale_attn_by_inverse_layer_idx", false},
      {"reorder_and_upcast_attn", false},
      {"tie_word_embeddings", true},
      {"torch_dtype", "float32"},
      {"optimus_cc", optimus_cc_note(m, iteration, tokenizer)}};
  nlohmann::ordered_json full_config = config;
  add_tokenizer(flag, dir, m, tokenizer, full_config);
  write_file_atomic(dir + "/config.json", full_config.dump(2) + "\n");
}


void check_hf_llama(const GptConfig& m, const TokenizerSpec& tokenizer) {
  const char* flag = "--hf-llama";
  const char* gpt2 = "; export it with --hf-gpt2";
  require_arch(m.normalization == Normalization::RMSNorm, flag, "Llama", "normalization",
               normalization_name(m.normalization), "RMSNorm", gpt2);
  require_arch(m.swiglu, flag, "Llama", "swiglu", "false", "--swiglu", gpt2);
  require_arch(!m.learned_positions(), flag, "Llama", "position_embedding_type",
               position_embedding_name(m.position_embedding), "rope", gpt2);
  require_arch(m.rotary_dim() == m.head_dim(), flag, "Llama", "rotary_percent", fmt::format("{:g}", m.rotary_percent),
               "1 (LlamaForCausalLM rotates whole heads)", "");
  check_tokenizer(flag, m, tokenizer);
}

void write_hf_llama(const std::string& dir, const GptConfig& m, const std::map<std::string, MergedTensor>& full,
                    int64_t iteration, const TokenizerSpec& tokenizer) {
  const char* flag = "--hf-llama";
  check_hf_llama(m, tokenizer);
  make_dir(flag, dir);
  const int64_t C = m.hidden_size, H = m.num_attention_heads, G = m.kv_heads(), D = m.head_dim();
  const int64_t F = m.ffn_hidden_size(), r = H / G;
  SafetensorsWriter w;
  w.set_metadata("format", "pt");  // what transformers expects of a PyTorch safetensors file
  auto copy = [&](const std::string& hf, const std::string& ours) {
    const MergedTensor& t = merged_tensor(full, ours);
    w.add_f32(hf, t.data.data(), t.shape);
  };
  // Rows [row0, row0 + rows) of a [*, cols] tensor (cols 1: a vector).
  auto rows_of = [&](const std::string& hf, const MergedTensor& t, const std::vector<int64_t>& rows) {
    const int64_t cols = t.shape.size() > 1 ? t.shape[1] : 1;
    std::vector<float> out(rows.size() * size_t(cols));
    for (size_t i = 0; i < rows.size(); ++i)
      std::copy_n(t.data.begin() + rows[i] * cols, cols, out.begin() + int64_t(i) * cols);
    std::vector<int64_t> shape{int64_t(rows.size())};
    if (t.shape.size() > 1) shape.push_back(cols);
    w.add_f32(hf, out.data(), shape);
  };
  std::vector<int64_t> q_rows, k_rows, v_rows, gate_rows, up_rows;
  for (int64_t h = 0; h < H; ++h)
    for (int64_t d = 0; d < D; ++d) q_rows.push_back(((h / r) * (r + 2) + h % r) * D + d);
  for (int64_t g = 0; g < G; ++g)
    for (int64_t d = 0; d < D; ++d) {
      k_rows.push_back((g * (r + 2) + r) * D + d);
      v_rows.push_back((g * (r + 2) + r + 1) * D + d);
    }
  for (int64_t f = 0; f < F; ++f) gate_rows.push_back(f), up_rows.push_back(F + f);

  copy("model.embed_tokens.weight", "embedding.word_embeddings.weight");
  for (int l = 0; l < m.num_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".", h = "model.layers." + std::to_string(l) + ".";
    copy(h + "input_layernorm.weight", p + "input_layernorm.weight");
    const MergedTensor& qkv = merged_tensor(full, p + "attention.query_key_value.weight");
    rows_of(h + "self_attn.q_proj.weight", qkv, q_rows);
    rows_of(h + "self_attn.k_proj.weight", qkv, k_rows);
    rows_of(h + "self_attn.v_proj.weight", qkv, v_rows);
    copy(h + "self_attn.o_proj.weight", p + "attention.dense.weight");
    copy(h + "post_attention_layernorm.weight", p + "post_attention_layernorm.weight");
    const MergedTensor& fc = merged_tensor(full, p + "mlp.dense_h_to_4h.weight");
    rows_of(h + "mlp.gate_proj.weight", fc, gate_rows);
    rows_of(h + "mlp.up_proj.weight", fc, up_rows);
    copy(h + "mlp.down_proj.weight", p + "mlp.dense_4h_to_h.weight");
    if (m.add_bias_linear) {  // attention_bias (q, k, v, o) and mlp_bias (gate, up, down)
      const MergedTensor& qkv_b = merged_tensor(full, p + "attention.query_key_value.bias");
      rows_of(h + "self_attn.q_proj.bias", qkv_b, q_rows);
      rows_of(h + "self_attn.k_proj.bias", qkv_b, k_rows);
      rows_of(h + "self_attn.v_proj.bias", qkv_b, v_rows);
      copy(h + "self_attn.o_proj.bias", p + "attention.dense.bias");
      const MergedTensor& fc_b = merged_tensor(full, p + "mlp.dense_h_to_4h.bias");
      rows_of(h + "mlp.gate_proj.bias", fc_b, gate_rows);
      rows_of(h + "mlp.up_proj.bias", fc_b, up_rows);
      copy(h + "mlp.down_proj.bias", p + "mlp.dense_4h_to_h.bias");
    }
  }
  copy("model.norm.weight", "final_layernorm.weight");
  // Tied: transformers ties lm_head to embed_tokens on load; the file holds it once.
  if (!m.tied_embeddings()) copy("lm_head.weight", "output_layer.weight");
  w.write(dir + "/model.safetensors");

  nlohmann::ordered_json config = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      // The padded vocabulary (rows of embed_tokens), as for GPT-2.
      {"vocab_size", m.padded_vocab_size()},
      {"hidden_size", C},
      {"intermediate_size", F},
      {"num_hidden_layers", m.num_layers},
      {"num_attention_heads", H},
      {"num_key_value_heads", G},
      {"head_dim", D},
      {"hidden_act", "silu"},
      {"max_position_embeddings", m.max_position_embeddings},
      {"rms_norm_eps", decimal(m.norm_epsilon)},
      {"rope_theta", decimal(m.rotary_base)},
      {"rope_scaling", nullptr},
      {"attention_bias", m.add_bias_linear},
      {"mlp_bias", m.add_bias_linear},
      {"attention_dropout", decimal(m.attention_dropout)},
      {"tie_word_embeddings", m.tied_embeddings()},
      {"initializer_range", decimal(m.init_method_std)},
      {"pretraining_tp", 1},
      {"use_cache", true},
      {"torch_dtype", "float32"},
      {"optimus_cc", optimus_cc_note(m, iteration, tokenizer)}};
  config["optimus_cc"]["rope"] =
      "rotate-half pairs (i, i + head_dim/2), as LlamaForCausalLM: q_proj and k_proj are our rows unpermuted";
  add_tokenizer(flag, dir, m, tokenizer, config);
  write_file_atomic(dir + "/config.json", config.dump(2) + "\n");
}

}  // namespace occ::cmd
