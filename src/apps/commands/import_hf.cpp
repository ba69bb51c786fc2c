// optimus-cc import-hf: a Hugging Face GPT2LMHeadModel or LlamaForCausalLM
// folder -> an iteration-0 checkpoint of the same model (one process; train
// --finetune loads it into any layout). Reads config.json and model.safetensors
// or the shards of model.safetensors.index.json (F32, F16, BF16), maps every
// field the engine has (q/k/v fused per query group, GQA, tied or untied output,
// biases, epsilons, rope base), copies the folder's tokenizer (tokenizer.model:
// SentencePiece; vocab.json + merges.txt: GPT-2 BPE) into CKPT/tokenizer/ and
// names it in the checkpoint, so that train --finetune and generate use it.
// What the engine does not model (rope scaling, sliding windows, experts, ...)
// is refused with a one-line error naming the field.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <cstring>

#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "apps/commands/commands.h"
#include "apps/commands/hf_folder.h"
#include "apps/commands/train_flags.h"
#include "core/precision.h"
#include "core/safetensors.h"
#include "core/tensor_file.h"
#include "data/tokenizer.h"
#include "model/gpt.h"
#include "train/checkpoint.h"
#include "train/checkpoint_merge.h"
#include "train/checkpoint_store.h"
#include "train/output_paths.h"
#include "train/options.h"

namespace occ::cmd {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Refuses a config field the engine does not model.
void refuse(bool unsupported, const std::string& field, const json& value, const std::string& why) {
  OCC_CHECK(!unsupported, "import-hf: config.json has {} = {}, which optimus-cc does not model ({})", field,
            value.dump(), why);
}
bool set(const json& c, const char* key) { return c.contains(key) && !c[key].is_null(); }
template <class T>
T get(const json& c, const char* key, T fallback) {
  if (!set(c, key)) return fallback;
  OCC_CHECK(c[key].is_number() || c[key].is_boolean(), "import-hf: config.json field {} = {} is not a number", key,
            c[key].dump());
  return c[key].get<T>();
}
int need_int(const json& c, const char* key) {
  OCC_CHECK(set(c, key) && c[key].is_number_integer() && c[key].get<int64_t>() > 0,
            "import-hf: config.json lacks a positive integer {}", key);
  return c[key].get<int>();
}

// The largest power of two up to 128 that pads `vocab` to exactly `rows`, else rows itself.
int vocab_divisor(int vocab, int rows) {
  for (int d = 128; d >= 1; d /= 2)
    if (rows % d == 0 && (vocab + d - 1) / d * d == rows) return d;
  return rows;
}

using Tensors = std::map<std::string, MergedTensor>;

GptConfig gpt2_config(const json& c) {
  refuse(get(c, "scale_attn_by_inverse_layer_idx", false), "scale_attn_by_inverse_layer_idx", c.value("scale_attn_by_inverse_layer_idx", json()),
         "attention scores scaled by 1/sqrt(head size) only");
  refuse(!get(c, "scale_attn_weights", true), "scale_attn_weights", c.value("scale_attn_weights", json()), "scaled attention");
  refuse(get(c, "add_cross_attention", false), "add_cross_attention", c.value("add_cross_attention", json()), "a decoder only");
  const std::string act = c.value("activation_function", std::string("gelu_new"));
  refuse(act != "gelu_new" && act != "gelu_pytorch_tanh", "activation_function", act,
         "GeLU's tanh approximation (gelu_new)");
  GptConfig m;
  m.num_layers = need_int(c, "n_layer");
  m.hidden_size = need_int(c, "n_embd");
  m.num_attention_heads = need_int(c, "n_head");
  m.max_position_embeddings = need_int(c, "n_positions");
  m.ffn_hidden = get(c, "n_inner", 0);
  m.norm_epsilon = get(c, "layer_norm_epsilon", 1e-5f);
  m.hidden_dropout = get(c, "resid_pdrop", 0.1f);
  m.attention_dropout = get(c, "attn_pdrop", 0.1f);
  m.init_method_std = get(c, "initializer_range", 0.02f);
  m.untie_embeddings_and_output_weights = !get(c, "tie_word_embeddings", true);
  refuse(m.untie_embeddings_and_output_weights, "tie_word_embeddings", c.value("tie_word_embeddings", json()),
         "GPT-2's output tied to wte");
  return m;
}

GptConfig llama_config(const json& c) {
  for (const char* key : {"rope_scaling", "sliding_window", "num_local_experts", "num_experts", "n_routed_experts",
                          "moe_intermediate_size", "layer_types", "qk_norm"})
    refuse(set(c, key) && !(c[key].is_boolean() && !c[key].get<bool>()), key, c.value(key, json()),
           "RoPE without scaling, full causal attention, dense MLPs");
  refuse(get(c, "use_sliding_window", false), "use_sliding_window", c.value("use_sliding_window", json()), "full causal attention");
  const std::string act = c.value("hidden_act", std::string("silu"));
  refuse(act != "silu", "hidden_act", act, "SwiGLU with SiLU");
  refuse(get(c, "partial_rotary_factor", 1.0) != 1.0, "partial_rotary_factor", c.value("partial_rotary_factor", json()),
         "LlamaForCausalLM's RoPE on whole heads");
  GptConfig m;
  m.normalization = Normalization::RMSNorm;
  m.swiglu = true;
  m.position_embedding = PositionEmbedding::Rope;
  m.num_layers = need_int(c, "num_hidden_layers");
  m.hidden_size = need_int(c, "hidden_size");
  m.num_attention_heads = need_int(c, "num_attention_heads");
  m.max_position_embeddings = need_int(c, "max_position_embeddings");
  m.ffn_hidden = need_int(c, "intermediate_size");
  const int kv = get(c, "num_key_value_heads", m.num_attention_heads);
  m.group_query_attention = kv != m.num_attention_heads;
  m.num_query_groups = m.group_query_attention ? kv : 1;
  refuse(get(c, "head_dim", m.head_dim()) != m.head_dim(), "head_dim", c.value("head_dim", json()),
         fmt::format("head size = hidden_size / num_attention_heads = {}", m.head_dim()));
  m.norm_epsilon = get(c, "rms_norm_eps", 1e-6f);
  m.rotary_base = get(c, "rope_theta", 10000.0f);
  const bool attention_bias = get(c, "attention_bias", false), mlp_bias = get(c, "mlp_bias", false);
  OCC_CHECK(attention_bias == mlp_bias,
            "import-hf: config.json has attention_bias = {} but mlp_bias = {}, which optimus-cc does not model (one "
            "switch, --disable-bias-linear, covers the attention's and the MLP's biases together)",
            attention_bias, mlp_bias);
  m.add_bias_linear = attention_bias;
  m.hidden_dropout = 0.0f;
  m.attention_dropout = get(c, "attention_dropout", 0.0f);
  m.init_method_std = get(c, "initializer_range", 0.02f);
  m.untie_embeddings_and_output_weights = !get(c, "tie_word_embeddings", false);
  return m;
}

// A tied model's lm_head.weight, where the folder holds one (transformers saves it
// for some models): a copy of the embedding, the output layer being the embedding itself.
void tied_output_copy(const HfWeights& w, const MergedTensor& embedding, const std::string& embedding_name, int rows,
                      int64_t C) {
  if (!w.has("lm_head.weight")) return;
  const MergedTensor head = w.read("lm_head.weight", {rows, C});
  OCC_CHECK(head.data == embedding.data,
            "import-hf: config.json has tie_word_embeddings = true (the output layer is {} itself), but the folder's "
            "lm_head.weight differs from it; set tie_word_embeddings to false in config.json if lm_head.weight is "
            "the model's own output layer", embedding_name);
}

// HF names, with or without the wrapper's prefix ("transformer." / "model.").
std::string hf_name(const HfWeights& w, const std::string& prefix, const std::string& name) {
  return w.has(prefix + name) || !w.has(name) ? prefix + name : name;
}

void map_gpt2(const HfWeights& w, const GptConfig& m, int rows, Tensors& out) {
  const int64_t C = m.hidden_size, D = m.head_dim(), F = m.ffn_hidden_size();
  auto n = [&](const std::string& name) { return hf_name(w, "transformer.", name); };
  // Conv1D [in, out] -> our linear [out, in].
  auto linear = [&](const std::string& name, int64_t in, int64_t outs) {
    const MergedTensor t = w.read(n(name), {in, outs});
    MergedTensor r{{outs, in}, std::vector<float>(t.data.size())};
    for (int64_t i = 0; i < in; ++i)
      for (int64_t o = 0; o < outs; ++o) r.data[size_t(o * in + i)] = t.data[size_t(i * outs + o)];
    return r;
  };
  out["embedding.word_embeddings.weight"] = w.read(n("wte.weight"), {rows, C});
  out["embedding.position_embeddings.weight"] = w.read(n("wpe.weight"), {m.max_position_embeddings, C});
  for (int l = 0; l < m.num_layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".", p = "layers." + std::to_string(l) + ".";
    out[p + "input_layernorm.weight"] = w.read(n(h + "ln_1.weight"), {C});
    out[p + "input_layernorm.bias"] = w.read(n(h + "ln_1.bias"), {C});
    // c_attn columns [q | k | v] over all heads -> our rows [head][q|k|v][D].
    const MergedTensor qkv = linear(h + "attn.c_attn.weight", C, 3 * C);
    const MergedTensor qkv_b = w.read(n(h + "attn.c_attn.bias"), {3 * C});
    MergedTensor ours{{3 * C, C}, std::vector<float>(size_t(3 * C * C))}, ours_b{{3 * C}, std::vector<float>(size_t(3 * C))};
    for (int64_t o = 0; o < 3 * C; ++o) {
      const int64_t j = o / C, hd = (o % C) / D, d = o % D, r = hd * 3 * D + j * D + d;
      std::copy_n(qkv.data.begin() + o * C, C, ours.data.begin() + r * C);
      ours_b.data[size_t(r)] = qkv_b.data[size_t(o)];
    }
    out[p + "attention.query_key_value.weight"] = ours;
    out[p + "attention.query_key_value.bias"] = ours_b;
    out[p + "attention.dense.weight"] = linear(h + "attn.c_proj.weight", C, C);
    out[p + "attention.dense.bias"] = w.read(n(h + "attn.c_proj.bias"), {C});
    out[p + "post_attention_layernorm.weight"] = w.read(n(h + "ln_2.weight"), {C});
    out[p + "post_attention_layernorm.bias"] = w.read(n(h + "ln_2.bias"), {C});
    out[p + "mlp.dense_h_to_4h.weight"] = linear(h + "mlp.c_fc.weight", C, F);
    out[p + "mlp.dense_h_to_4h.bias"] = w.read(n(h + "mlp.c_fc.bias"), {F});
    out[p + "mlp.dense_4h_to_h.weight"] = linear(h + "mlp.c_proj.weight", F, C);
    out[p + "mlp.dense_4h_to_h.bias"] = w.read(n(h + "mlp.c_proj.bias"), {C});
  }
  out["final_layernorm.weight"] = w.read(n("ln_f.weight"), {C});
  out["final_layernorm.bias"] = w.read(n("ln_f.bias"), {C});
  tied_output_copy(w, out["embedding.word_embeddings.weight"], n("wte.weight"), rows, C);
}

void map_llama(const HfWeights& w, const GptConfig& m, int rows, Tensors& out) {
  const int64_t C = m.hidden_size, H = m.num_attention_heads, G = m.kv_heads(), D = m.head_dim();
  const int64_t F = m.ffn_hidden_size(), r = H / G;
  auto n = [&](const std::string& name) { return hf_name(w, "model.", name); };
  auto put_rows = [](MergedTensor& dst, const MergedTensor& src, int64_t src_row, int64_t dst_row, int64_t count) {
    const int64_t cols = dst.shape.size() > 1 ? dst.shape[1] : 1;
    std::copy_n(src.data.begin() + src_row * cols, count * cols, dst.data.begin() + dst_row * cols);
  };
  out["embedding.word_embeddings.weight"] = w.read(n("embed_tokens.weight"), {rows, C});
  for (int l = 0; l < m.num_layers; ++l) {
    const std::string h = "layers." + std::to_string(l) + ".", p = "layers." + std::to_string(l) + ".";
    out[p + "input_layernorm.weight"] = w.read(n(h + "input_layernorm.weight"), {C});
    // Our fused rows per query group g: [q of its r heads | k | v], D rows each.
    for (int bias = 0; bias <= (m.add_bias_linear ? 1 : 0); ++bias) {
      const std::string kind = bias ? "bias" : "weight";
      auto shape = [&](int64_t rows_) { return bias ? std::vector<int64_t>{rows_} : std::vector<int64_t>{rows_, C}; };
      const MergedTensor q = w.read(n(h + "self_attn.q_proj." + kind), shape(H * D));
      const MergedTensor k = w.read(n(h + "self_attn.k_proj." + kind), shape(G * D));
      const MergedTensor v = w.read(n(h + "self_attn.v_proj." + kind), shape(G * D));
      MergedTensor qkv{shape((H + 2 * G) * D), std::vector<float>(size_t((H + 2 * G) * D * (bias ? 1 : C)))};
      for (int64_t g = 0; g < G; ++g) {
        put_rows(qkv, q, g * r * D, g * (r + 2) * D, r * D);
        put_rows(qkv, k, g * D, (g * (r + 2) + r) * D, D);
        put_rows(qkv, v, g * D, (g * (r + 2) + r + 1) * D, D);
      }
      out[p + "attention.query_key_value." + kind] = qkv;
      out[p + "attention.dense." + kind] = w.read(n(h + "self_attn.o_proj." + kind), bias ? shape(C) : std::vector<int64_t>{C, H * D});
      const MergedTensor gate = w.read(n(h + "mlp.gate_proj." + kind), shape(F));
      const MergedTensor up = w.read(n(h + "mlp.up_proj." + kind), shape(F));
      MergedTensor fc{shape(2 * F), gate.data};
      fc.data.insert(fc.data.end(), up.data.begin(), up.data.end());
      out[p + "mlp.dense_h_to_4h." + kind] = fc;
      out[p + "mlp.dense_4h_to_h." + kind] = w.read(n(h + "mlp.down_proj." + kind), bias ? shape(C) : std::vector<int64_t>{C, F});
    }
    out[p + "post_attention_layernorm.weight"] = w.read(n(h + "post_attention_layernorm.weight"), {C});
  }
  out["final_layernorm.weight"] = w.read(n("norm.weight"), {C});
  if (m.untie_embeddings_and_output_weights)
    out["output_layer.weight"] = w.read("lm_head.weight", {rows, C});
  else
    tied_output_copy(w, out["embedding.word_embeddings.weight"], n("embed_tokens.weight"), rows, C);
}

// An import's position: iteration 0, and a record that it was imported, so that a
// train --load of it without --finetune is told to pass --finetune.
CheckpointPosition imported_position(const std::string& input) {
  CheckpointPosition pos;
  pos.data = {{kImportedFromKey, fs::absolute(input).lexically_normal().string()}};
  return pos;
}

std::string flags_of(const GptConfig& m) {
  std::string s = fmt::format("--num-layers {} --hidden-size {} --num-attention-heads {} --max-position-embeddings {}",
                              m.num_layers, m.hidden_size, m.num_attention_heads, m.max_position_embeddings);
  if (m.make_vocab_size_divisible_by != 128)
    s += fmt::format(" --make-vocab-size-divisible-by {}", m.make_vocab_size_divisible_by);
  if (m.ffn_hidden > 0) s += fmt::format(" --ffn-hidden-size {}", m.ffn_hidden);
  if (m.norm_epsilon != 1e-5f) s += fmt::format(" --norm-epsilon {}", m.norm_epsilon);
  if (m.normalization == Normalization::RMSNorm) s += " --normalization RMSNorm";
  if (m.swiglu) s += " --swiglu";
  if (!m.learned_positions()) s += fmt::format(" --position-embedding-type rope --rotary-base {}", m.rotary_base);
  if (m.group_query_attention) s += fmt::format(" --group-query-attention --num-query-groups {}", m.num_query_groups);
  if (m.untie_embeddings_and_output_weights) s += " --untie-embeddings-and-output-weights";
  if (!m.add_bias_linear) s += " --disable-bias-linear";
  return s;
}

}  // namespace

int import_hf(int argc, char** argv) {
  CLI::App app{"Import a Hugging Face GPT2LMHeadModel or LlamaForCausalLM folder as an iteration-0 checkpoint "
               "(continue it with train --finetune --load CKPT)", "import-hf"};
  std::string input, save;
  TokenizerSpec tokenizer_flags;
  app.add_option("--input", input, "the model folder (config.json, model.safetensors or its shard index, tokenizer)")
      ->required();
  app.add_option("--save", save, "checkpoint directory to write (iteration 0, one process)")->required();
  add_tokenizer_flags(app, tokenizer_flags);  // default: the folder's own tokenizer
  if (int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;
  tokenizer_flags.validate();
  // A new checkpoint directory: importing over a run's checkpoints would make iteration 0
  // the latest and leave the run's later saves to be trained over.
  {
    std::error_code ec;
    const CheckpointStore store(save);
    const std::vector<int64_t> saved = fs::is_directory(save, ec) ? store.iterations() : std::vector<int64_t>{};
    OCC_CHECK(saved.empty() && !fs::exists(fs::path(save) / "latest_checkpointed_iteration.txt", ec),
              "import-hf: --save {} already holds checkpoints{}; import into a new directory", save,
              saved.empty() ? std::string() : fmt::format(" (iterations {})", fmt::join(saved, ", ")));
    OCC_CHECK(!fs::exists(fs::path(save) / "tokenizer", ec),
              "import-hf: --save {} already holds a tokenizer/ folder (of an earlier import); import into a new "
              "directory", save);
  }
  const bool save_existed = fs::exists(save);
  {  // where it writes, before the first write (the tokenizer's files go into --save too)
    OutputPaths outputs;
    outputs.checkpoint_output("--save", save);
    outputs.input_dir("--input", input);
    outputs.tokenizer_inputs(tokenizer_flags);
    outputs.check();
  }
  // Written in staging folders that become the checkpoint at the end; a failure
  // removes them (and --save, when this import created it): nothing is left behind.
  const std::string tokenizer_staging = save + "/tokenizer.tmp", tokenizer_dir = save + "/tokenizer";
  auto clean_up = [&] {
    std::error_code ec;
    abort_checkpoint(save, 0);
    fs::remove_all(tokenizer_staging, ec);
    if (!save_existed) {
      fs::remove_all(save, ec);
    } else {
      for (const fs::path& p : {fs::path(tokenizer_dir), fs::path(save) / "iter_0000000",
                                fs::path(save) / "latest_checkpointed_iteration.txt"})
        fs::remove_all(p, ec);
    }
  };
  try {
    const json c = read_hf_json(input + "/config.json", "config.json");
    std::string arch = c.value("model_type", std::string());
    if (c.contains("architectures") && c.value("architectures", json()).is_array() && !c.value("architectures", json()).empty()) {
      const std::string a = c.value("architectures", json())[0].is_string() ? c.value("architectures", json())[0].get<std::string>() : "";
      refuse(a != "GPT2LMHeadModel" && a != "LlamaForCausalLM", "architectures", c.value("architectures", json()),
             "GPT2LMHeadModel or LlamaForCausalLM");
      arch = a == "GPT2LMHeadModel" ? "gpt2" : "llama";
    }
    refuse(arch != "gpt2" && arch != "llama", "model_type", c.value("model_type", json()), "gpt2 or llama");
    GptConfig m = arch == "gpt2" ? gpt2_config(c) : llama_config(c);
    m.seq_length = m.max_position_embeddings;
    const int rows = need_int(c, "vocab_size");

    const bool own_tokenizer = !tokenizer_flags.given();  // the folder's, copied into CKPT/tokenizer/
    TokenizerSpec spec = own_tokenizer ? folder_tokenizer(input) : tokenizer_flags;
    const std::unique_ptr<Tokenizer> tok = own_tokenizer ? load_folder_tokenizer(spec, input) : load_tokenizer(spec);
    OCC_CHECK(tok->vocab_size() <= rows,
              "import-hf: tokenizer {} has {} tokens but the model's vocab_size is {}; they do not belong together",
              tok->describe(), tok->vocab_size(), rows);
    m.vocab_size = tok->vocab_size();
    m.make_vocab_size_divisible_by = vocab_divisor(m.vocab_size, rows);

    const HfWeights weights(input);
    Tensors full;
    if (arch == "gpt2")
      map_gpt2(weights, m, rows, full);
    else
      map_llama(weights, m, rows, full);
    // Every tensor of the folder is used, but GPT-2's causal-mask buffers.
    for (const auto& name : weights.names())
      OCC_CHECK(weights.used_.count(name) || name.find("attn.bias") != std::string::npos ||
                    name.find("attn.masked_bias") != std::string::npos || name.find("rotary_emb.inv_freq") != std::string::npos,
                "import-hf: tensor {} of {} has no place in the {} model optimus-cc builds from config.json", name, input,
                arch);

    TrainOptions opt;
    opt.model = m;
    opt.tokenizer = spec;
    opt.global_batch_size = opt.micro_batch_size;
    ParallelLayout layout;
    opt.validate(layout);
    SelfCommunicator self;
    GptStage stage(m, layout, self, opt.seed);
    std::vector<float> params(size_t(stage.param_layout().total()));
    for (const auto& t : stage.param_layout().tensors()) {
      const MergedTensor& src = full.at(t.name);
      OCC_CHECK(src.shape == t.full_shape, "internal: imported {} has the wrong shape", t.name);
      std::copy(src.data.begin(), src.data.end(), params.begin() + t.offset);
    }
    stage.params().assign_from_host(params);
    if (own_tokenizer) {
      spec = copy_tokenizer(spec, tokenizer_staging, tokenizer_dir);
      fs::rename(tokenizer_staging, tokenizer_dir);
    }
    opt.tokenizer = spec;
    const std::string staging = begin_checkpoint(save, 0);
    const auto zeros = std::make_shared<const std::vector<float>>(params.size(), 0.0f);  // Adam's moments
    CheckpointFiles files;
    files.add(kShardStateFile, checkpoint_shard(opt, layout, stage,
                                                {std::make_shared<const std::vector<float>>(params), zeros, zeros},
                                                imported_position(input)));
    files.write(staging, layout, save_id(files.digest(layout, 0)));
    commit_checkpoint(save, 0);
    std::printf("import-hf: %s (%s, %s; %d layers, hidden %d, %d heads, vocabulary %d of %s padded to %d) -> %s "
                "(iteration 0)\n",
                input.c_str(), arch == "gpt2" ? "GPT2LMHeadModel" : "LlamaForCausalLM",
                m.describe_architecture().c_str(), m.num_layers, m.hidden_size, m.num_attention_heads, m.vocab_size,
                tok->describe().c_str(), m.padded_vocab_size(), save.c_str());
    std::printf("model flags for train --finetune --load %s: %s\n", save.c_str(), flags_of(m).c_str());
  } catch (...) {
    clean_up();
    throw;
  }
  return 0;
}

}  // namespace occ::cmd
