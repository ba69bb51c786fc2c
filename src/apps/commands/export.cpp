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
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "apps/commands/commands.h"
#include "apps/commands/train_flags.h"
#include "core/safetensors.h"
#include "core/tensor_file.h"
#include "model/params.h"
#include "train/checkpoint_store.h"

namespace occ::cmd {

namespace {

namespace fs = std::filesystem;

constexpr const char* kShardFile = "model_optim_rng.bin";
constexpr const char* kHeadCopy = "lm_head.word_embeddings.weight";
constexpr const char* kWordEmbedding = "embedding.word_embeddings.weight";
// Config fields every shard of one checkpoint must agree on.
const char* kShapeFields[] = {"num_layers",        "hidden_size",      "num_attention_heads",
                              "max_position_embeddings", "vocab_size", "padded_vocab_size",
                              "tensor_model_parallel_size", "pipeline_model_parallel_size"};

int config_int(const nlohmann::json& c, const char* key, const std::string& path) {
  OCC_CHECK(c.contains(key) && c[key].is_number_integer(),
            "checkpoint shard {} has no integer config field '{}'; it was not written by optimus-cc train", path, key);
  return c[key].get<int>();
}

// The model the checkpoint was trained as. The padded vocabulary is taken as
// saved (the padding multiple itself is not in the checkpoint).
GptConfig model_from_config(const nlohmann::json& c, const std::string& path) {
  GptConfig m;
  m.num_layers = config_int(c, "num_layers", path);
  m.hidden_size = config_int(c, "hidden_size", path);
  m.num_attention_heads = config_int(c, "num_attention_heads", path);
  m.seq_length = config_int(c, "seq_length", path);
  m.max_position_embeddings = config_int(c, "max_position_embeddings", path);
  m.vocab_size = config_int(c, "vocab_size", path);
  const int padded = config_int(c, "padded_vocab_size", path);
  OCC_CHECK(m.vocab_size >= 1 && padded >= m.vocab_size,
            "checkpoint shard {}: padded_vocab_size {} is smaller than vocab_size {}; the file is inconsistent", path,
            padded, m.vocab_size);
  m.make_vocab_size_divisible_by = padded;  // so that padded_vocab_size() == padded
  m.hidden_dropout = c.value("hidden_dropout", 0.0f);
  m.attention_dropout = c.value("attention_dropout", 0.0f);
  OCC_CHECK(m.padded_vocab_size() == padded, "internal: padded vocabulary {} != {}", m.padded_vocab_size(), padded);
  return m;
}

double max_abs_diff(const float* a, const float* b, size_t n) {
  double d = 0.0;
  for (size_t i = 0; i < n; ++i) d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
  return d;
}

// A float as the shortest decimal that reads back as it (1e-5, not 9.99999974e-06).
double decimal(float f) { return std::stod(fmt::format("{}", f)); }

struct Merged {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

// Writes the model in Hugging Face GPT-2 naming (GPT2Model keys, no prefix;
// the LM head is tied to wte and not stored).
void write_hf_gpt2(const std::string& dir, const GptConfig& m, const std::map<std::string, Merged>& full,
                   int64_t iteration) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  OCC_CHECK(!ec, "--hf-gpt2 {}: cannot create the directory: {}", dir, ec.message());
  const int64_t C = m.hidden_size, H = m.num_attention_heads, D = m.head_dim(), F = m.ffn_hidden_size();
  auto get = [&](const std::string& name) -> const Merged& {
    auto it = full.find(name);
    OCC_CHECK(it != full.end(), "internal: merged model lacks {}", name);
    return it->second;
  };
  SafetensorsWriter w;
  w.set_metadata("format", "pt");  // what transformers expects of a PyTorch safetensors file
  auto copy = [&](const std::string& hf, const std::string& ours) {
    const Merged& t = get(ours);
    w.add_f32(hf, t.data.data(), t.shape);
  };
  // Linear weight [out, in] (ours, y = x W^T) -> Conv1D weight [in, out] (y = x W).
  auto conv1d = [&](const std::string& hf, const std::string& ours) {
    const Merged& t = get(ours);
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
      const Merged& wq = get(p + "attention.query_key_value.weight");
      const Merged& bq = get(p + "attention.query_key_value.bias");
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
        {"note",
         "vocab_size is the padded vocabulary of the trained model; ids >= tokenizer_vocab_size are padding "
         "rows never produced by the SentencePiece tokenizer the run used"}}}};
  write_file_atomic(dir + "/config.json", config.dump(2) + "\n");
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
  app.add_option("--hf-gpt2", hf_dir, "also write DIR/model.safetensors + DIR/config.json in Hugging Face GPT-2 form");
  if (int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;

  CheckpointStore store(load);
  OCC_CHECK(fs::is_directory(load), "--load {}: no such directory", load);
  if (iteration < 0) {
    auto latest = store.latest();
    OCC_CHECK(latest.has_value(),
              "--load {}: no checkpoint there (no latest_checkpointed_iteration.txt); check the path or pass "
              "--iteration",
              load);
    iteration = *latest;
  }
  const std::string dir = store.iteration_dir(iteration);
  auto shard_path = [&](int tp, int pp) { return shard_dir(dir, tp, pp) + "/" + kShardFile; };
  auto open_shard = [&](int tp, int pp) {
    const std::string path = shard_path(tp, pp);
    OCC_CHECK(fs::exists(path),
              "checkpoint {} iteration {} has no shard for tensor rank {} pipeline rank {} (missing {}); the "
              "checkpoint is incomplete",
              load, iteration, tp, pp, path);
    TensorFileReader r = TensorFileReader::open(path);
    OCC_CHECK(r.meta().value("format", "") == "optimus-cc checkpoint" && r.meta().contains("config"),
              "{} is not an optimus-cc checkpoint shard", path);
    return r;
  };

  TensorFileReader first = open_shard(0, 0);
  const nlohmann::json config = first.meta()["config"];
  const std::string first_path = shard_path(0, 0);
  const GptConfig model = model_from_config(config, first_path);
  const int T = config_int(config, "tensor_model_parallel_size", first_path);
  const int P = config_int(config, "pipeline_model_parallel_size", first_path);
  OCC_CHECK(T >= 1 && P >= 1, "checkpoint shard {}: bad parallel sizes tensor {} x pipeline {}", first_path, T, P);
  {
    ParallelLayout check;
    check.tp_size = T;
    check.pp_size = P;
    model.validate(check);
  }

  // No shard directories beyond the saved layout (a mix of two saves).
  std::set<std::string> expected;
  for (int pp = 0; pp < P; ++pp)
    for (int tp = 0; tp < T; ++tp) expected.insert(fs::path(shard_dir(dir, tp, pp)).filename().string());
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    OCC_CHECK(name.rfind("mp_rank_", 0) != 0 || expected.count(name),
              "checkpoint {} iteration {} has shard {} outside its saved layout of tensor {} x pipeline {}; the "
              "directory mixes two saves",
              load, iteration, name, T, P);
  }

  // Full tensors, keyed by name; TP-replicated ones come from TP rank 0 and
  // are compared against every other TP rank.
  std::map<std::string, Merged> full;
  std::vector<float> shard;
  for (int pp = 0; pp < P; ++pp) {
    for (int tp = 0; tp < T; ++tp) {
      TensorFileReader r = (tp == 0 && pp == 0) ? std::move(first) : open_shard(tp, pp);
      const std::string& path = r.path();
      const auto& meta = r.meta();
      OCC_CHECK(meta.value("tp_rank", -1) == tp && meta.value("pp_rank", -1) == pp,
                "checkpoint shard {} says it is tensor rank {} pipeline rank {}; the file was moved between shard "
                "directories",
                path, meta.value("tp_rank", -1), meta.value("pp_rank", -1));
      OCC_CHECK(meta.value("iteration", int64_t(-1)) == iteration,
                "checkpoint shard {} is of iteration {}, not {}; the checkpoint mixes two saves", path,
                meta.value("iteration", int64_t(-1)), iteration);
      for (const char* field : kShapeFields)
        OCC_CHECK(meta["config"].value(field, nlohmann::json()) == config[field],
                  "checkpoint shard {} has {} = {} but shard mp_rank_00_000 has {}; the checkpoint mixes two runs",
                  path, field, meta["config"].value(field, nlohmann::json()).dump(), config[field].dump());

      ParallelLayout l;
      l.tp_size = T;
      l.pp_size = P;
      l.tp_rank = tp;
      l.pp_rank = pp;
      const ParamLayout pl(model, l);
      size_t params_in_file = 0;
      for (const auto& name : r.names()) params_in_file += name.rfind("param/", 0) == 0;
      OCC_CHECK(params_in_file == pl.tensors().size(),
                "checkpoint shard {} holds {} parameter tensors but tensor rank {} pipeline rank {} of this model "
                "has {}; the shard does not match its config",
                path, params_in_file, tp, pp, pl.tensors().size());
      for (const auto& t : pl.tensors()) {
        const std::string key = "param/" + t.name;
        OCC_CHECK(r.has(key), "checkpoint shard {} lacks tensor {}", path, key);
        OCC_CHECK(r.shape(key) == t.shape, "checkpoint shard {}: tensor {} has shape {} but this layout expects {}",
                  path, key, nlohmann::json(r.shape(key)).dump(), nlohmann::json(t.shape).dump());
        shard.resize(size_t(t.numel));
        r.read(key, shard.data(), t.numel);
        Merged& m = full[t.name];
        if (m.data.empty()) {
          m.shape = t.full_shape;
          int64_t n = 1;
          for (auto d : t.full_shape) n *= d;
          m.data.assign(size_t(n), std::nanf(""));
        }
        if (t.split == TpSplit::None && tp > 0) {
          if (std::memcmp(m.data.data(), shard.data(), shard.size() * sizeof(float)) != 0)
            fail("tensor {} differs between tensor-parallel ranks 0 and {} of pipeline stage {} (max |diff| {:.3e}); "
                 "replicated tensors must be bit-identical, so the run that saved {} was inconsistent",
                 t.name, tp, pp, max_abs_diff(m.data.data(), shard.data(), shard.size()), load);
          continue;
        }
        for (int64_t i = 0; i < t.numel; ++i) m.data[size_t(t.global_index(i, tp))] = shard[size_t(i)];
      }
    }
  }

  // The tied embedding: the last stage's copy must equal the first stage's.
  double head_diff = -1.0;
  if (auto it = full.find(kHeadCopy); it != full.end()) {
    const Merged& emb = full.at(kWordEmbedding);
    head_diff = max_abs_diff(emb.data.data(), it->second.data.data(), emb.data.size());
    if (std::memcmp(emb.data.data(), it->second.data.data(), emb.data.size() * sizeof(float)) != 0)
      fail("the last stage's copy of the tied word embedding ({}) differs from {} (max |diff| {:.3e}); the two "
           "copies must be bit-identical, so the run that saved {} was inconsistent",
           kHeadCopy, kWordEmbedding, head_diff, load);
    full.erase(it);
  }

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
  std::printf("exported iteration %lld of %s (tensor %d x pipeline %d shards): %zu tensors, %lld parameters -> %s\n",
              (long long)iteration, load.c_str(), T, P, full.size(), (long long)total, out.c_str());
  if (T > 1) std::printf("replicated tensors bit-identical across the %d tensor-parallel ranks\n", T);
  if (head_diff >= 0)
    std::printf("last stage's LM-head copy of the word embedding bit-identical (max |diff| %g)\n", head_diff);
  if (!hf_dir.empty()) {
    write_hf_gpt2(hf_dir, model, full, iteration);
    std::printf("Hugging Face GPT-2 model -> %s/model.safetensors + config.json (vocab_size %d = padded vocabulary "
                "of the %d-token tokenizer)\n",
                hf_dir.c_str(), model.padded_vocab_size(), model.vocab_size);
  }
  return 0;
}

}  // namespace occ::cmd
