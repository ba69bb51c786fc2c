#include "train/checkpoint_merge.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include <fmt/ranges.h>

#include "core/tensor_file.h"
#include "model/params.h"
#include "train/checkpoint.h"
#include "train/checkpoint_store.h"
#include "train/options.h"

namespace occ {

namespace {

namespace fs = std::filesystem;

constexpr const char* kHeadCopy = "lm_head.word_embeddings.weight";
constexpr const char* kWordEmbedding = "embedding.word_embeddings.weight";
// Config fields every shard of one checkpoint must agree on.
const char* kShardAgreementFields[] = {
    "num_layers", "hidden_size", "num_attention_heads", "max_position_embeddings", "vocab_size", "padded_vocab_size",
    "tensor_model_parallel_size", "pipeline_model_parallel_size"};

int config_int(const nlohmann::json& c, const char* key, const std::string& path) {
  OCC_CHECK(c.contains(key) && c[key].is_number_integer(),
            "checkpoint shard {} has no integer config field '{}'; it was not written by optimus-cc train", path, key);
  return c[key].get<int>();
}

// --num-layers-per-virtual-pipeline-stage of the saved run (0: not interleaved).
int virtual_stage_layers(const nlohmann::json& c, const std::string& path) {
  const char* key = "num_layers_per_virtual_pipeline_stage";
  if (!c.is_object() || !c.contains(key)) return 0;
  OCC_CHECK(c[key].is_number_integer() && c[key].get<int64_t>() >= 0 && c[key].get<int64_t>() < (int64_t(1) << 20),
            "checkpoint shard {} has a bad config field '{}'; it was not written by optimus-cc train", path, key);
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
  architecture_from_json(c, m, path);
  OCC_CHECK(m.padded_vocab_size() == padded, "internal: padded vocabulary {} != {}", m.padded_vocab_size(), padded);
  return m;
}

double max_abs_diff(const float* a, const float* b, size_t n) {
  double d = 0.0;
  for (size_t i = 0; i < n; ++i) d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
  return d;
}



// Writes the model in Hugging Face GPT-2 naming (GPT2Model keys, no prefix;
// the LM head is tied to wte and not stored).
}  // namespace

MergedCheckpoint merge_checkpoint(const std::string& load, int64_t iteration) {
  // Every file of one save, before any tensor is read.
  const SavedCheckpoint saved = verify_checkpoint(load, iteration);
  iteration = saved.iteration;
  const std::string dir = saved.dir;
  auto shard_path = [&](int tp, int pp) { return shard_dir(dir, tp, pp) + "/" + kShardStateFile; };
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
  // Interleaved runs hold several model chunks per pipeline shard (absent before interleaving existed).
  const int chunk_layers = virtual_stage_layers(config, first_path);
  OCC_CHECK(chunk_layers == 0 || (model.num_layers % P == 0 && chunk_layers <= model.num_layers / P &&
                                   (model.num_layers / P) % chunk_layers == 0),
            "checkpoint shard {}: {} layers per virtual pipeline stage do not fit {} layers over {} stages",
            first_path, chunk_layers, model.num_layers, P);
  const int chunks = chunk_layers == 0 ? 1 : model.num_layers / P / chunk_layers;
  {
    ParallelLayout check;
    check.tp_size = T;
    check.pp_size = P;
    check.vp_size = chunks;
    model.validate(check);
  }

  // Full tensors, keyed by name; TP-replicated ones come from TP rank 0 and
  // are compared against every other TP rank.
  std::map<std::string, MergedTensor> full;
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
      for (const char* field : kShardAgreementFields)
        OCC_CHECK(meta["config"].value(field, nlohmann::json()) == config[field],
                  "checkpoint shard {} has {} = {} but shard mp_rank_00_000 has {}; the checkpoint mixes two runs",
                  path, field, meta["config"].value(field, nlohmann::json()).dump(), config[field].dump());
      const nlohmann::json arch = architecture_json(model);  // (named: items() refers into it)
      for (const auto& [field, value] : arch.items())
        OCC_CHECK(meta["config"].value(field, nlohmann::json()) == config.value(field, nlohmann::json()),
                  "checkpoint shard {} has {} = {} but shard mp_rank_00_000 has {}; the checkpoint mixes two runs",
                  path, field, meta["config"].value(field, nlohmann::json()).dump(),
                  config.value(field, nlohmann::json()).dump());

      OCC_CHECK(virtual_stage_layers(meta["config"], path) == chunk_layers,
                "checkpoint shard {} has num_layers_per_virtual_pipeline_stage = {} but shard mp_rank_00_000 has {}; "
                "the checkpoint mixes two runs",
                path, virtual_stage_layers(meta["config"], path), chunk_layers);
      ParallelLayout l;
      l.tp_size = T;
      l.pp_size = P;
      l.vp_size = chunks;
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
        MergedTensor& m = full[t.name];
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
    const MergedTensor& emb = full.at(kWordEmbedding);
    head_diff = max_abs_diff(emb.data.data(), it->second.data.data(), emb.data.size());
    if (std::memcmp(emb.data.data(), it->second.data.data(), emb.data.size() * sizeof(float)) != 0)
      fail("the last stage's copy of the tied word embedding ({}) differs from {} (max |diff| {:.3e}); the two "
           "copies must be bit-identical, so the run that saved {} was inconsistent",
           kHeadCopy, kWordEmbedding, head_diff, load);
    full.erase(it);
  }

  MergedCheckpoint merged;
  merged.iteration = iteration;
  merged.config = config;
  merged.model = model;
  merged.tensor_parallel = T;
  merged.pipeline_parallel = P;
  merged.tensors = std::move(full);
  merged.head_copy_diff = head_diff;
  return merged;
}

void load_merged_weights(const MergedCheckpoint& merged, const std::string& root, const GptConfig& model,
                         GptStage& stage) {
  const GptConfig& saved = merged.model;
  auto same = [&](const char* field, int64_t have, int64_t want) {
    OCC_CHECK(have == want,
              "--finetune: checkpoint {} holds a model with {} = {} but this run has {}; use the checkpoint's model "
              "flags (import-hf prints them)", root, field, have, want);
  };
  same("num_layers", saved.num_layers, model.num_layers);
  same("hidden_size", saved.hidden_size, model.hidden_size);
  same("num_attention_heads", saved.num_attention_heads, model.num_attention_heads);
  same("max_position_embeddings", saved.max_position_embeddings, model.max_position_embeddings);
  same("padded_vocab_size", saved.padded_vocab_size(), model.padded_vocab_size());
  const nlohmann::json have = architecture_json(saved), want = architecture_json(model);
  for (const auto& [field, value] : want.items())
    OCC_CHECK(have[field] == value,
              "--finetune: checkpoint {} holds a model with {} = {} but this run has {}; use the checkpoint's model "
              "flags (import-hf prints them)", root, field, have[field].dump(), value.dump());
  const int tp_rank = stage.layout().tp_rank;
  std::vector<float> p(stage.params().size());
  for (const auto& t : stage.param_layout().tensors()) {
    // The last stage's copy of the tied embedding is the embedding itself.
    const std::string name = t.word_embedding ? "embedding.word_embeddings.weight" : t.name;
    auto it = merged.tensors.find(name);
    OCC_CHECK(it != merged.tensors.end() && it->second.shape == t.full_shape,
              "--finetune: checkpoint {} has no tensor {} of shape [{}]", root, name, fmt::join(t.full_shape, ", "));
    const std::vector<float>& full = it->second.data;
    for (int64_t i = 0; i < t.numel; ++i) p[size_t(t.offset + i)] = full[size_t(t.global_index(i, tp_rank))];
  }
  stage.params().assign_from_host(p);
}

}  // namespace occ
