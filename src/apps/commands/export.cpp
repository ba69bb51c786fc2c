// Merges a (possibly TP x PP sharded) checkpoint into one safetensors file of
// the full model under the single-process parameter names, and optionally a
// Hugging Face GPT-2 directory (model.safetensors + config.json).
//
// Every shard is read with the ParamLayout of its (tp_rank, pp_rank) in the
// saved layout, so the slicing is exactly the one training used. Consistency
// is checked while merging: a tensor that TP does not split must be
// bit-identical on every TP rank of its stage, and the last stage's copy of
// the tied word embedding ("lm_head.word_embeddings.weight", PP > 1) must be
// bit-identical to the first stage's embedding; the copy is not exported.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "apps/commands/commands.h"
#include "apps/commands/train_flags.h"
#include "core/safetensors.h"
#include "core/tensor_file.h"
#include "model/params.h"
#include "train/checkpoint_merge.h"

namespace occ::cmd {

namespace {

namespace fs = std::filesystem;

constexpr const char* kWordEmbedding = "embedding.word_embeddings.weight";

// A float as the shortest decimal that reads back as it (1e-5, not 9.99999974e-06).
double decimal(float f) { return std::stod(fmt::format("{}", f)); }

// GPT-2 BPE runs: the tokenizer files Hugging Face's GPT2Tokenizer loads
// (vocab.json, merges.txt: GPT-2's own files, copied) and its configuration.
void write_hf_tokenizer(const std::string& dir, const TokenizerSpec& spec, const GptConfig& m) {
  auto copy = [&dir](const std::string& from, const char* to) {
    std::ifstream in(from, std::ios::binary);
    OCC_CHECK(in.good(), "--hf-gpt2: cannot read the run's tokenizer file {}; pass --vocab-file and --merge-file "
              "where the files are now", from);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    write_file_atomic(dir + "/" + to, bytes.str());
  };
  copy(spec.vocab_file, "vocab.json");
  copy(spec.merge_file, "merges.txt");
  const nlohmann::ordered_json tokenizer_config = {
      {"tokenizer_class", "GPT2Tokenizer"}, {"model_max_length", m.max_position_embeddings},
      {"bos_token", "<|endoftext|>"},      {"eos_token", "<|endoftext|>"},
      {"unk_token", "<|endoftext|>"},      {"add_prefix_space", false}};
  write_file_atomic(dir + "/tokenizer_config.json", tokenizer_config.dump(2) + "\n");
  const nlohmann::ordered_json special = {
      {"bos_token", "<|endoftext|>"}, {"eos_token", "<|endoftext|>"}, {"unk_token", "<|endoftext|>"}};
  write_file_atomic(dir + "/special_tokens_map.json", special.dump(2) + "\n");
}

void write_hf_gpt2(const std::string& dir, const GptConfig& m, const std::map<std::string, MergedTensor>& full,
                   int64_t iteration, const TokenizerSpec& tokenizer) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  OCC_CHECK(!ec, "--hf-gpt2 {}: cannot create the directory: {}", dir, ec.message());
  const int64_t C = m.hidden_size, H = m.num_attention_heads, D = m.head_dim(), F = m.ffn_hidden_size();
  auto get = [&](const std::string& name) -> const MergedTensor& {
    auto it = full.find(name);
    OCC_CHECK(it != full.end(), "internal: merged model lacks {}", name);
    return it->second;
  };
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
      {"layer_norm_epsilon", decimal(m.layernorm_epsilon)},
      {"resid_pdrop", decimal(m.hidden_dropout)},
      {"embd_pdrop", decimal(m.hidden_dropout)},
      {"attn_pdrop", decimal(m.attention_dropout)},
      {"initializer_range", decimal(m.init_method_std)},
      {"scale_attn_weights", true},
      {"scale_attn_by_inverse_layer_idx", false},
      {"reorder_and_upcast_attn", false},
      {"tie_word_embeddings", true},
      {"torch_dtype", "float32"},
      {"optimus_cc",
       {{"iteration", iteration},
        {"tokenizer_vocab_size", m.vocab_size},
        {"padded_vocab_size", m.padded_vocab_size()},
        {"tokenizer_type", tokenizer_type_name(tokenizer.type)},
        {"note",
         "vocab_size is the padded vocabulary of the trained model; ids >= tokenizer_vocab_size are padding "
         "rows never produced by the tokenizer the run used"}}}};
  nlohmann::ordered_json full_config = config;
  if (tokenizer.type == TokenizerType::Gpt2Bpe) {
    const std::unique_ptr<Tokenizer> tok = load_tokenizer(tokenizer);  // (also checks the files)
    OCC_CHECK(tok->vocab_size() == m.vocab_size,
              "--hf-gpt2: tokenizer {} has {} tokens but the model was trained with {}; pass the run's --vocab-file "
              "and --merge-file", tok->describe(), tok->vocab_size(), m.vocab_size);
    if (tok->eod_id() >= 0) full_config["bos_token_id"] = full_config["eos_token_id"] = tok->eod_id();
    write_hf_tokenizer(dir, tokenizer, m);
  }
  write_file_atomic(dir + "/config.json", full_config.dump(2) + "\n");
}

}  // namespace

int export_checkpoint(int argc, char** argv) {
  CLI::App app{"Merge a sharded checkpoint into one safetensors file of the full model (single-process names); "
               "optionally also a Hugging Face GPT-2 directory",
               "export"};
  std::string load, out, hf_dir;
  int64_t iteration = -1;
  app.add_option("--load", load, "checkpoint directory (as given to train --save)")->required();
  app.add_option("--out", out, "output .safetensors file")->required();
  app.add_option("--iteration", iteration, "iteration to export (default: the latest committed one)");
  app.add_option("--hf-gpt2", hf_dir,
                 "also write DIR/model.safetensors + DIR/config.json in Hugging Face GPT-2 form (and, for a GPT-2 BPE "
                 "run, the tokenizer: vocab.json, merges.txt, tokenizer_config.json)");
  TokenizerSpec tokenizer_flags;
  add_tokenizer_flags(app, tokenizer_flags);  // default: the files the run was trained with
  if (int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;

  const MergedCheckpoint merged = merge_checkpoint(load, iteration);
  const GptConfig& model = merged.model;
  const auto& full = merged.tensors;
  const int T = merged.tensor_parallel, P = merged.pipeline_parallel;
  const double head_diff = merged.head_copy_diff;
  iteration = merged.iteration;
  const nlohmann::json& config = merged.config;
  // Output in the single-process layout's order and names.
  const ParamLayout single(model, ParallelLayout{});
  OCC_CHECK(full.size() == single.tensors().size(), "internal: merged {} tensors, the full model has {}", full.size(),
            single.tensors().size());
  SafetensorsWriter w;
  int64_t total = 0;
  for (const auto& t : single.tensors()) {
    auto it = full.find(t.name);
    OCC_CHECK(it != full.end() && it->second.shape == t.full_shape, "internal: merged model lacks {}", t.name);
    w.add_f32(t.name, it->second.data.data(), t.full_shape);
    total += int64_t(it->second.data.size());
  }
  w.set_metadata("format", "optimus-cc model");
  w.set_metadata("iteration", std::to_string(iteration));
  w.set_metadata("config", config.dump());
  w.write(out);
  // Read the file back: what is on disk parses and equals the merged model bit for bit.
  const SafetensorsReader written = SafetensorsReader::open(out);
  for (const auto& t : single.tensors()) {
    const std::vector<float>& want = full.at(t.name).data;
    const std::vector<float> got = written.has(t.name) ? written.read_f32(t.name) : std::vector<float>{};
    OCC_CHECK(got.size() == want.size() && std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0,
              "{} does not read back as written (tensor {}); check the disk and export again", out, t.name);
  }
  std::printf("exported iteration %lld of %s (tensor %d x pipeline %d shards): %zu tensors, %lld parameters -> %s "
              "(read back and verified)\n",
              (long long)iteration, load.c_str(), T, P, full.size(), (long long)total, out.c_str());
  if (T > 1) std::printf("replicated tensors bit-identical across the %d tensor-parallel ranks\n", T);
  if (head_diff >= 0)
    std::printf("last stage's LM-head copy of the word embedding bit-identical (max |diff| %g)\n", head_diff);
  if (!hf_dir.empty()) {
    const TokenizerSpec tokenizer = tokenizer_flags.given() ? tokenizer_flags : tokenizer_from_config(config);
    write_hf_gpt2(hf_dir, model, full, iteration, tokenizer);
    std::printf("Hugging Face GPT-2 model -> %s/model.safetensors + config.json (vocab_size %d = padded vocabulary "
                "of the %d-token tokenizer)\n",
                hf_dir.c_str(), model.padded_vocab_size(), model.vocab_size);
  }
  return 0;
}

}  // namespace occ::cmd
