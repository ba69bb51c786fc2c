#pragma once
// What a rank saves and restores: its parameter shard, Adam moments and the
// training position, in ROOT/iter_NNNNNNN/mp_rank_TT_PPP/model_optim_rng.bin,
// committed atomically through CheckpointStore. Dropout and data order are
// pure functions of (seed, iteration, consumed samples), so they need no state.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

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
};

// Saving is three steps so that many ranks can write one checkpoint: one rank
// opens the staging directory, every shard owner writes its shard into it,
// then (after a barrier) one rank commits it.
std::string begin_checkpoint(const std::string& root, int64_t iteration);  // returns the staging dir
// Adam's moments of the whole stage buffer on the host (the distributed
// optimizer gathers its shards into this first), so a checkpoint is the same
// file whatever the DP size or optimizer, and loads into either.
struct AdamMoments {
  std::vector<float> m, v;
};
// save_id identifies this save (the same in every shard and replica file of it).
void write_checkpoint_shard(const std::string& staging, const TrainOptions& opt, const ParallelLayout& layout,
                            const GptStage& stage, const AdamMoments& adam, CheckpointPosition pos,
                            const std::string& save_id);
// A save identifier: unique to this job (run_nonce, agreed by its ranks) and iteration.
std::string make_save_id(uint64_t run_nonce, int64_t iteration);
// A fresh random run nonce (rank 0 draws it, the others receive it).
uint64_t random_run_nonce();
// The key every file of a save holds its identifier under.
inline constexpr const char* kSaveIdKey = "save_id";
void commit_checkpoint(const std::string& root, int64_t iteration);
// A save that failed on some rank: its staging directory is removed (the previous
// checkpoint stays the latest). Never throws.
void abort_checkpoint(const std::string& root, int64_t iteration) noexcept;

// Loads the latest checkpoint into stage (and adam's whole-buffer moments
// unless null); refuses, with a one-line error, a checkpoint of another model
// shape or layout.
CheckpointPosition load_checkpoint(const std::string& root, const TrainOptions& opt, const ParallelLayout& layout,
                                   GptStage& stage, AdamMoments* adam);

}  // namespace occ
