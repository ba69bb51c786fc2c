#pragma once
// What a rank saves and restores: its parameter shard, Adam moments and the
// training position, in ROOT/iter_NNNNNNN/mp_rank_TT_PPP/model_optim_rng.bin,
// committed atomically through CheckpointStore. Dropout and data order are
// pure functions of (seed, iteration, consumed samples), so they need no state.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor_file.h"
#include "model/gpt.h"
#include "train/adamw.h"
#include "train/options.h"

namespace occ {

// One committed checkpoint iteration whose files were verified to be one save's
// (verify_checkpoint).
struct SavedCheckpoint {
  std::string root, dir;      // --load ROOT, and ROOT/iter_NNNNNNN
  int64_t iteration = 0;
  nlohmann::json config;      // the saved run's TrainOptions::to_json(), from shard mp_rank_00_000
  std::string save_id;        // "" for a checkpoint from before save identifiers
  int tensor_parallel = 1, pipeline_parallel = 1;
  int diloco_replicas = 0;    // DiLoCo replica files in each shard directory (0: none)
};

// Before anything is read into a model: the files of checkpoint iteration
// `iteration` under root (< 0: the latest committed one) belong to one save. Every
// shard of the saved layout (T x P, from shard mp_rank_00_000's config) is there,
// says its own place, the same iteration and the same save identifier, and no shard
// directory lies outside the layout; a run saved with DiLoCo has a replica file
// (diloco_dp_DDD.bin) of every replica in every shard, each of that save, and none
// is there otherwise; every compressor-state file present is of that save. Reads
// headers only. Throws a one-line occ::Error naming the file and what it belongs to.
SavedCheckpoint verify_checkpoint(const std::string& root, int64_t iteration = -1);

struct CheckpointPosition {
  int64_t iteration = 0, consumed_samples = 0;
  nlohmann::json loss_scaler;  // --fp16's scaler state (LossScaler::state()), null otherwise
  int64_t skipped_nonfinite = 0;  // iterations skipped by --skip-nonfinite so far
  nlohmann::json data;            // the dataset trained on: {"documents": N, "tokens": T} (null in old checkpoints)
  // Validation samples read by the evaluations so far (Megatron's consumed_valid_samples);
  // -1 in a checkpoint from before it: Megatron's formula then stands in.
  int64_t consumed_valid_samples = -1;
};
// The key of `data` in an import-hf checkpoint: the folder it was imported from (it
// was trained on no data of ours: it loads with --finetune).
inline constexpr const char* kImportedFromKey = "imported_from";

// Saving is three steps so that many ranks can write one checkpoint: one rank
// opens the staging directory, every shard owner writes its shard into it
// (train/checkpoint_writer.h: inline or in the background), then, once every
// rank has written its files, one rank commits it.
std::string begin_checkpoint(const std::string& root, int64_t iteration);  // returns the staging dir
// Adam's moments of the whole stage buffer on the host (the distributed
// optimizer gathers its shards into this first), so a checkpoint is the same
// file whatever the DP size or optimizer, and loads into either.
struct AdamMoments {
  std::vector<float> m, v;
};
// Host copies of a stage's whole weights and Adam moments (see AdamMoments),
// which a checkpoint shard's tensors view rather than copy again.
struct HostCopies {
  std::shared_ptr<const std::vector<float>> params, m, v;
};
// This rank's shard file (dp_rank 0 of each TP x PP position writes one), in
// memory; it keeps `host` alive until it is written.
TensorFileWriter checkpoint_shard(const TrainOptions& opt, const ParallelLayout& layout, const GptStage& stage,
                                  HostCopies host, CheckpointPosition pos);

// The files one rank writes into a save (its shard, DiLoCo and compressor state),
// built in memory first: the save's identifier comes from every rank's contents
// (save_id()) and goes into each file, so that a shard of another save (whose
// contents differ) is told apart, and a save repeated bit for bit (a resumed run)
// writes the same bytes.
class CheckpointFiles {
 public:
  // `name`: the file's name inside this rank's shard directory.
  void add(std::string name, TensorFileWriter file) { files_.emplace_back(std::move(name), std::move(file)); }
  // This rank's part of the identifier: its files' contents and names, its place, the iteration.
  uint64_t digest(const ParallelLayout& layout, int64_t iteration) const;
  // Writes every file into STAGING/mp_rank_TT_PPP/, stamped with save_id.
  void write(const std::string& staging, const ParallelLayout& layout, const std::string& save_id);
  bool empty() const { return files_.empty(); }  // (a data-parallel rank > 0 often has nothing to write)

 private:
  std::vector<std::pair<std::string, TensorFileWriter>> files_;
};
// The identifier of a save from the XOR of its ranks' digests.
std::string save_id(uint64_t combined_digest);
// The key every file of a save holds its identifier under.
inline constexpr const char* kSaveIdKey = "save_id";
void commit_checkpoint(const std::string& root, int64_t iteration);
// A save that failed on some rank: its staging directory is removed (the previous
// checkpoint stays the latest). Never throws.
void abort_checkpoint(const std::string& root, int64_t iteration) noexcept;

// The one choice of what a run with --load resumes from, made once at start-up
// and read by every check and load after it (the tokenizer --finetune takes, the
// verification of the files, the weights, the compressor and DiLoCo state, the
// data checks): --ckpt-step's iteration when given (>= 0), else the latest (the
// marker's). nullopt: nothing to resume and the run trains from scratch, which
// only Megatron's resume pattern allows: --load names the --save directory (the
// same folder, however spelt) and it holds no checkpoint yet (no marker and no
// iter_* directory; it may not exist). Any other --load without a checkpoint, or
// with --ckpt-step, is refused with a one-line error (a mistyped path must not
// silently train from scratch).
std::optional<int64_t> checkpoint_to_resume(const std::string& load, int64_t ckpt_step, const std::string& save);

// Loads checkpoint `iteration` of root (checkpoint_to_resume's choice) into
// stage (and adam's whole-buffer moments unless null); refuses, with a one-line
// error, a checkpoint of another model shape or layout.
CheckpointPosition load_checkpoint(const std::string& root, int64_t iteration, const TrainOptions& opt,
                                   const ParallelLayout& layout, GptStage& stage, AdamMoments* adam);

}  // namespace occ
