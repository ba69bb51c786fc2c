#include "train/checkpoint.h"

#include <cstdio>
#include <filesystem>

#include "core/tensor_file.h"
#include "train/checkpoint_store.h"

namespace occ {

namespace {
// Fields whose mismatch makes a checkpoint unusable for this model.
const char* kShapeFields[] = {"num_layers", "hidden_size", "num_attention_heads", "max_position_embeddings",
                              "padded_vocab_size", "tensor_model_parallel_size", "pipeline_model_parallel_size"};

// The shard file of `layout` in checkpoint `iteration` (the latest when < 0) under root.
std::string shard_to_load(const std::string& root, const ParallelLayout& layout, int64_t iteration) {
  CheckpointStore store(root);
  const std::string path =
      checkpoint_shard_path(store.iteration_dir(checkpoint_iteration_to_load(root, iteration)), layout);
  OCC_CHECK(std::filesystem::exists(path),
            "checkpoint {} has no shard for tensor rank {} pipeline rank {} (missing {}); it was saved with another "
            "parallel layout or is incomplete",
            root, layout.tp_rank, layout.pp_rank, path);
  return path;
}
}  // namespace

std::string begin_checkpoint(const std::string& root, int64_t iteration) {
  return CheckpointStore(root).begin(iteration);
}

int64_t checkpoint_iteration_to_load(const std::string& root, int64_t ckpt_step) {
  if (ckpt_step >= 0) return ckpt_step;  // iteration_dir() names the saved ones if it is not there
  auto latest = CheckpointStore(root).latest();
  OCC_CHECK(latest.has_value(),
            "--load {}: no checkpoint there (no latest_checkpointed_iteration.txt); check the path", root);
  return *latest;
}

std::string checkpoint_shard_path(const std::string& dir, const ParallelLayout& layout) {
  return shard_dir(dir, layout.tp_rank, layout.pp_rank) + "/" + kShardStateFile;
}

TensorFileWriter checkpoint_shard(const TrainOptions& opt, const ParallelLayout& layout, const GptStage& stage,
                                  AdamMoments adam, CheckpointPosition pos) {
  nlohmann::json meta = {{"format", "optimus-cc checkpoint"},
                         {"version", 1},
                         {"iteration", pos.iteration},
                         {"consumed_samples", pos.consumed_samples},
                         {"config", opt.to_json()},
                         {"tp_rank", layout.tp_rank},
                         {"pp_rank", layout.pp_rank},
                         {"lr", opt.lr_schedule().at(pos.iteration)}};
  if (!pos.loss_scaler.is_null()) meta["loss_scaler"] = pos.loss_scaler;
  if (pos.skipped_nonfinite > 0) meta["skipped_nonfinite"] = pos.skipped_nonfinite;
  if (!pos.data.is_null()) meta["data"] = pos.data;
  TensorFileWriter w(meta);
  // Host copies of the fp32 master weights and moments (the checkpoint is the
  // same whichever device trained them), each copied once: the file's tensors are views into them.
  const auto p = std::make_shared<const std::vector<float>>(stage.params().to_host());
  const auto m = std::make_shared<const std::vector<float>>(std::move(adam.m));
  const auto v = std::make_shared<const std::vector<float>>(std::move(adam.v));
  OCC_CHECK(m->size() == p->size() && v->size() == p->size(),
            "internal: Adam moments of {} / {} values for {} parameters", m->size(), v->size(), p->size());
  for (const auto& t : stage.param_layout().tensors()) {
    w.add_view("param/" + t.name, p, p->data() + t.offset, t.shape);
    w.add_view("adam_m/" + t.name, m, m->data() + t.offset, t.shape);
    w.add_view("adam_v/" + t.name, v, v->data() + t.offset, t.shape);
  }
  return w;
}

void commit_checkpoint(const std::string& root, int64_t iteration) { CheckpointStore(root).commit(iteration); }

nlohmann::json read_checkpoint_config(const std::string& root) {
  ParallelLayout first;  // rank (0, 0) always exists
  TensorFileReader r = TensorFileReader::open(shard_to_load(root, first, -1));
  OCC_CHECK(r.meta().value("format", "") == "optimus-cc checkpoint", "{} is not an optimus-cc checkpoint", root);
  return r.meta()["config"];
}

CheckpointPosition load_checkpoint(const std::string& root, const TrainOptions& opt, const ParallelLayout& layout,
                                   GptStage& stage, AdamMoments* adam) {
  const std::string path = shard_to_load(root, layout, opt.ckpt_step);
  TensorFileReader r = TensorFileReader::open(path);
  const auto& meta = r.meta();
  OCC_CHECK(meta.value("format", "") == "optimus-cc checkpoint", "{} is not an optimus-cc checkpoint", path);
  const nlohmann::json want = opt.to_json();
  // Interleaving places other layers on each pipeline rank (absent: a run from before it, not interleaved).
  const int saved_chunk_layers = meta["config"].value("num_layers_per_virtual_pipeline_stage", 0);
  OCC_CHECK(saved_chunk_layers == opt.layers_per_virtual_stage,
            "checkpoint {} was saved with num_layers_per_virtual_pipeline_stage = {} but this run has {}; the "
            "pipeline ranks hold other layers: use the saved run's --num-layers-per-virtual-pipeline-stage",
            root, saved_chunk_layers, opt.layers_per_virtual_stage);
  for (const char* field : kShapeFields) {
    const auto& cfg = meta["config"];
    OCC_CHECK(cfg.contains(field) && cfg[field] == want[field],
              "checkpoint {} was saved with {} = {} but this run has {}; use the saved run's model and parallel "
              "flags, or another --load",
              root, field, cfg.value(field, nlohmann::json()).dump(), want[field].dump());
  }
  {
    // The architecture (fields absent: a checkpoint from before the flags, GPT-2's).
    const auto& cfg = meta["config"];
    GptConfig saved = opt.model;  // (the shape was checked above)
    architecture_from_json(cfg, saved, root);
    const nlohmann::json have = architecture_json(saved), want_arch = architecture_json(opt.model);
    for (const auto& [field, value] : want_arch.items())
      OCC_CHECK(have[field] == value,
                "checkpoint {} was saved with {} = {} but this run has {}; it is another architecture: use the saved "
                "run's model flags, or another --load",
                root, field, have[field].dump(), value.dump());
  }
  if (meta["config"].value("seed", opt.seed) != opt.seed)
    std::printf("notice: checkpoint was trained with --seed %llu, this run uses %llu (data order and dropout change)\n",
                (unsigned long long)meta["config"]["seed"].get<uint64_t>(), (unsigned long long)opt.seed);
  std::vector<float> p(stage.params().size());
  if (adam) {
    adam->m.assign(p.size(), 0.0f);
    adam->v.assign(p.size(), 0.0f);
  }
  for (const auto& t : stage.param_layout().tensors()) {
    r.read("param/" + t.name, p.data() + t.offset, t.numel);
    if (adam) {
      r.read("adam_m/" + t.name, adam->m.data() + t.offset, t.numel);
      r.read("adam_v/" + t.name, adam->v.data() + t.offset, t.numel);
    }
  }
  stage.params().assign_from_host(p);
  CheckpointPosition pos{meta["iteration"].get<int64_t>(), meta["consumed_samples"].get<int64_t>(),
                         meta.value("loss_scaler", nlohmann::json()), meta.value("skipped_nonfinite", int64_t(0)),
                         meta.value("data", nlohmann::json())};
  return pos;
}

}  // namespace occ
