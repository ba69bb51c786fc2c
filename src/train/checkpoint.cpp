#include "train/checkpoint.h"

#include <cstdio>
#include <filesystem>
#include <set>

#include "core/tensor_file.h"
#include "train/checkpoint_store.h"

namespace occ {

namespace {
// Fields whose mismatch makes a checkpoint unusable for this model.
const char* kShapeFields[] = {"num_layers", "hidden_size", "num_attention_heads", "max_position_embeddings",
                              "padded_vocab_size", "tensor_model_parallel_size", "pipeline_model_parallel_size"};

std::string shard_name(int tp, int pp) { return fmt::format("mp_rank_{:02d}_{:03d}", tp, pp); }

// The header of a file of a checkpoint (a shard, a replica or compressor-state
// file), checked to be of the save `want` names.
struct SaveStamp {
  std::string save_id;
  int64_t iteration = -1;
};
SaveStamp stamp_of(const nlohmann::json& meta) {
  SaveStamp s;
  if (meta.contains(kSaveIdKey) && meta[kSaveIdKey].is_string()) s.save_id = meta[kSaveIdKey].get<std::string>();
  if (meta.contains("iteration") && meta["iteration"].is_number_integer()) s.iteration = meta["iteration"].get<int64_t>();
  return s;
}
std::string describe_stamp(const SaveStamp& s) {
  return s.save_id.empty() ? fmt::format("iteration {}, saved before save identifiers", s.iteration)
                           : fmt::format("save {}", s.save_id);
}
void check_same_save(const std::string& path, const SaveStamp& got, const SaveStamp& want, const std::string& root) {
  OCC_CHECK(got.save_id == want.save_id && got.iteration == want.iteration,
            "checkpoint file {} belongs to another save ({}) than shard mp_rank_00_000 ({}): checkpoint {} mixes "
            "files of two saves; restore the file from its own save, or --load another checkpoint",
            path, describe_stamp(got), describe_stamp(want), root);
}

int int_field(const nlohmann::json& c, const char* key, const std::string& path) {
  OCC_CHECK(c.is_object() && c.contains(key) && c[key].is_number_integer() && c[key].get<int64_t>() >= 1 &&
                c[key].get<int64_t>() < (int64_t(1) << 20),
            "checkpoint shard {} has no valid config field '{}'; it was not written by optimus-cc train", path, key);
  return c[key].get<int>();
}
}  // namespace

SavedCheckpoint verify_checkpoint(const std::string& root, int64_t iteration) {
  namespace fs = std::filesystem;
  std::error_code ec;
  OCC_CHECK(fs::is_directory(root, ec), "--load {}: no such directory; check the path", root);
  CheckpointStore store(root);
  if (iteration < 0) {
    auto latest = store.latest();
    OCC_CHECK(latest.has_value(),
              "--load {}: no checkpoint there (no latest_checkpointed_iteration.txt); check the path", root);
    iteration = *latest;
  }
  SavedCheckpoint saved;
  saved.root = root;
  saved.iteration = iteration;
  saved.dir = store.iteration_dir(iteration);
  const std::string first_path = shard_dir(saved.dir, 0, 0) + "/" + kShardStateFile;
  OCC_CHECK(fs::exists(first_path, ec),
            "checkpoint {} iteration {} has no shard mp_rank_00_000 (missing {}); it is incomplete: restore the shard "
            "or --load another checkpoint",
            root, iteration, first_path);
  const SaveStamp want = [&] {
    TensorFileReader r = TensorFileReader::open(first_path);
    OCC_CHECK(r.meta().value("format", "") == "optimus-cc checkpoint" && r.meta().contains("config"),
              "{} is not an optimus-cc checkpoint shard", first_path);
    saved.config = r.meta()["config"];
    saved.save_id = stamp_of(r.meta()).save_id;
    saved.diloco_replicas = r.meta().value("diloco_replicas", 0);
    return stamp_of(r.meta());
  }();
  OCC_CHECK(want.iteration == iteration,
            "checkpoint shard {} is of iteration {}, not {}; checkpoint {} mixes files of two saves: restore the shard "
            "or --load another checkpoint",
            first_path, want.iteration, iteration, root);
  const int T = saved.tensor_parallel = int_field(saved.config, "tensor_model_parallel_size", first_path);
  const int P = saved.pipeline_parallel = int_field(saved.config, "pipeline_model_parallel_size", first_path);
  std::set<std::string> expected;
  for (int pp = 0; pp < P; ++pp)
    for (int tp = 0; tp < T; ++tp) expected.insert(shard_name(tp, pp));
  for (const auto& e : fs::directory_iterator(saved.dir, ec)) {
    const std::string name = e.path().filename().string();
    OCC_CHECK(name.rfind("mp_rank_", 0) != 0 || expected.count(name),
              "checkpoint {} iteration {} has shard {} outside its saved layout of tensor {} x pipeline {}; the "
              "directory mixes two saves: remove it or --load another checkpoint",
              root, iteration, name, T, P);
  }
  // A run saved with DiLoCo: its replicas' files (a checkpoint from before this
  // field: as many as the first replica file says).
  const bool diloco = saved.config.is_object() && saved.config.contains("diloco") && !saved.config["diloco"].is_null();
  for (int pp = 0; pp < P; ++pp)
    for (int tp = 0; tp < T; ++tp) {
      const std::string dir = shard_dir(saved.dir, tp, pp);
      const std::string path = dir + "/" + kShardStateFile;
      OCC_CHECK(fs::exists(path, ec),
                "checkpoint {} iteration {} has no shard for tensor rank {} pipeline rank {} (missing {}); it is "
                "incomplete: restore the shard or --load another checkpoint",
                root, iteration, tp, pp, path);
      {
        TensorFileReader r = TensorFileReader::open(path);
        OCC_CHECK(r.meta().value("format", "") == "optimus-cc checkpoint" && r.meta().contains("config"),
                  "{} is not an optimus-cc checkpoint shard", path);
        check_same_save(path, stamp_of(r.meta()), want, root);
        OCC_CHECK(r.meta().value("tp_rank", -1) == tp && r.meta().value("pp_rank", -1) == pp,
                  "checkpoint shard {} says it is tensor rank {} pipeline rank {}; the file was moved between shard "
                  "directories: restore it or --load another checkpoint",
                  path, r.meta().value("tp_rank", -1), r.meta().value("pp_rank", -1));
      }
      // The replica and compressor-state files beside the shard.
      std::vector<std::string> replica_files;
      for (const auto& e : fs::directory_iterator(dir, ec)) {
        const std::string name = e.path().filename().string();
        const bool replica = name.rfind("diloco_dp_", 0) == 0, compressor = name.rfind("compress_dp_", 0) == 0;
        if ((!replica && !compressor) || name.size() < 4 || name.substr(name.size() - 4) != ".bin") continue;
        const std::string file = e.path().string();
        OCC_CHECK(!replica || diloco,
                  "checkpoint {} holds the DiLoCo replica file {}, but the run that saved it did not use DiLoCo: the "
                  "directory mixes files of two saves; remove the file or --load another checkpoint",
                  root, file);
        TensorFileReader r = TensorFileReader::open(file);
        check_same_save(file, stamp_of(r.meta()), want, root);
        if (replica) replica_files.push_back(name);
      }
      if (!diloco) continue;
      if (saved.diloco_replicas == 0) {  // from before the shard recorded it: the first replica file says
        const std::string first = dir + "/" + fmt::format("diloco_dp_{:03d}.bin", 0);
        OCC_CHECK(fs::exists(first, ec),
                  "checkpoint {} was saved with DiLoCo but has no state of replica 0 (missing {}); it is incomplete: "
                  "restore the file or --load another checkpoint",
                  root, first);
        saved.diloco_replicas = TensorFileReader::open(first).meta().value("dp_size", 0);
      }
      for (int d = 0; d < saved.diloco_replicas; ++d) {
        const std::string file = dir + "/" + fmt::format("diloco_dp_{:03d}.bin", d);
        OCC_CHECK(fs::exists(file, ec),
                  "checkpoint {} was saved with DiLoCo by {} replicas but has no state of replica {} (missing {}); it "
                  "is incomplete: restore the file or --load another checkpoint",
                  root, saved.diloco_replicas, d, file);
        TensorFileReader r = TensorFileReader::open(file);
        OCC_CHECK(r.meta().value("dp_rank", -1) == d && r.meta().value("dp_size", -1) == saved.diloco_replicas,
                  "checkpoint file {} holds the DiLoCo state of replica {} of {}, not replica {} of {}; it was moved "
                  "or copied from another run: restore it or --load another checkpoint",
                  file, r.meta().value("dp_rank", -1), r.meta().value("dp_size", -1), d, saved.diloco_replicas);
      }
      OCC_CHECK(int(replica_files.size()) == saved.diloco_replicas,
                "checkpoint {} holds {} DiLoCo replica files in {}, but its run had {} replicas; the directory mixes "
                "files of two saves: remove the extra ones or --load another checkpoint",
                root, replica_files.size(), dir, saved.diloco_replicas);
    }
  return saved;
}

std::string begin_checkpoint(const std::string& root, int64_t iteration) {
  return CheckpointStore(root).begin(iteration);
}

namespace {
// One spelling of a directory ("ck", "./ck/", a symlink to it): absolute, with
// the symlinks of its existing part resolved and no trailing separator.
std::filesystem::path resolved_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::weakly_canonical(std::filesystem::absolute(dir), ec);
  if (ec) p = std::filesystem::absolute(dir).lexically_normal();
  if (!p.has_filename() && p.has_parent_path() && p != p.root_path()) p = p.parent_path();
  return p;
}
}  // namespace

std::optional<int64_t> checkpoint_to_resume(const std::string& load, int64_t ckpt_step, const std::string& save) {
  namespace fs = std::filesystem;
  if (ckpt_step >= 0) return ckpt_step;  // verify_checkpoint names the saved ones if it is not there
  std::error_code ec;
  const bool exists = fs::is_directory(load, ec);
  const CheckpointStore store(load);
  const std::optional<int64_t> latest = exists ? store.latest() : std::nullopt;
  if (latest) return latest;
  const bool empty = !exists || store.iterations().empty();
  if (empty && !save.empty() && resolved_dir(load) == resolved_dir(save)) return std::nullopt;  // Megatron's resume pattern
  OCC_CHECK(exists, "--load {}: no such directory; check the path (to train from scratch, drop --load, or pass the "
            "same directory as --save, Megatron's resume pattern)", load);
  std::string saved;
  for (int64_t it : store.iterations()) saved += (saved.empty() ? "" : ", ") + std::to_string(it);
  fail("--load {}: no checkpoint there (no latest_checkpointed_iteration.txt); check the path{}", load,
       empty ? " (to train from scratch, drop --load, or pass the same directory as --save, Megatron's resume pattern)"
             : fmt::format(" (it holds iterations {} but no marker: pass --ckpt-step N to pick one)", saved));
}

TensorFileWriter checkpoint_shard(const TrainOptions& opt, const ParallelLayout& layout, const GptStage& stage,
                                  HostCopies host, CheckpointPosition pos) {
  nlohmann::json meta = {{"format", "optimus-cc checkpoint"},
                         {"version", 1},
                         {"iteration", pos.iteration},
                         {"consumed_samples", pos.consumed_samples},
                         {"config", opt.to_json()},
                         {"tp_rank", layout.tp_rank},
                         {"pp_rank", layout.pp_rank},
                         {"lr", opt.lr_schedule().at(pos.iteration)}};
  if (opt.diloco.enabled()) meta["diloco_replicas"] = layout.dp_size;
  if (!pos.loss_scaler.is_null()) meta["loss_scaler"] = pos.loss_scaler;
  if (pos.skipped_nonfinite > 0) meta["skipped_nonfinite"] = pos.skipped_nonfinite;
  if (!pos.data.is_null()) meta["data"] = pos.data;
  if (pos.consumed_valid_samples >= 0) meta["consumed_valid_samples"] = pos.consumed_valid_samples;
  TensorFileWriter w(meta);
  // The fp32 master weights and moments on the host (the checkpoint is the same
  // whichever device trained them); the file's tensors are views into them.
  const auto &p = host.params, &m = host.m, &v = host.v;
  OCC_CHECK(p && m && v && p->size() == size_t(stage.param_layout().total()) && m->size() == p->size() &&
                v->size() == p->size(),
            "internal: a checkpoint shard of {} parameters with {} / {} Adam moments", p ? p->size() : 0,
            m ? m->size() : 0, v ? v->size() : 0);
  for (const auto& t : stage.param_layout().tensors()) {
    w.add_view("param/" + t.name, p, p->data() + t.offset, t.shape);
    w.add_view("adam_m/" + t.name, m, m->data() + t.offset, t.shape);
    w.add_view("adam_v/" + t.name, v, v->data() + t.offset, t.shape);
  }
  return w;
}

uint64_t CheckpointFiles::digest(const ParallelLayout& layout, int64_t iteration) const {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) h = (h ^ ((v >> (8 * i)) & 0xff)) * 1099511628211ull;
  };
  for (int64_t v : {int64_t(layout.tp_rank), int64_t(layout.pp_rank), int64_t(layout.dp_rank), iteration}) mix(uint64_t(v));
  for (const auto& [name, file] : files_) {
    for (char c : name) mix(uint64_t(uint8_t(c)));
    mix(file.content_digest());
  }
  return h;
}

void CheckpointFiles::write(const std::string& staging, const ParallelLayout& layout, const std::string& id) {
  if (files_.empty()) return;
  const std::string dir = make_shard_dir(staging, layout.tp_rank, layout.pp_rank);
  for (auto& [name, file] : files_) {
    file.set_meta(kSaveIdKey, id);
    file.write(dir + "/" + name);
  }
}

std::string save_id(uint64_t combined_digest) { return fmt::format("{:016x}", combined_digest); }

void commit_checkpoint(const std::string& root, int64_t iteration) { CheckpointStore(root).commit(iteration); }

void abort_checkpoint(const std::string& root, int64_t iteration) noexcept {
  try {
    CheckpointStore(root).abort(iteration);
  } catch (...) {  // the failure being reported matters more than the leftover
  }
}

CheckpointPosition load_checkpoint(const std::string& root, int64_t iteration, const TrainOptions& opt,
                                   const ParallelLayout& layout, GptStage& stage, AdamMoments* adam) {
  const SavedCheckpoint saved = verify_checkpoint(root, iteration);
  OCC_CHECK(layout.tp_rank < saved.tensor_parallel && layout.pp_rank < saved.pipeline_parallel,
            "checkpoint {} was saved with tensor {} x pipeline {} shards, and has none for tensor rank {} pipeline "
            "rank {}; use the saved run's --tensor-model-parallel-size and --pipeline-model-parallel-size",
            root, saved.tensor_parallel, saved.pipeline_parallel, layout.tp_rank, layout.pp_rank);
  const std::string path = shard_dir(saved.dir, layout.tp_rank, layout.pp_rank) + "/" + kShardStateFile;
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
                         meta.value("data", nlohmann::json()), meta.value("consumed_valid_samples", int64_t(-1))};
  return pos;
}

}  // namespace occ
