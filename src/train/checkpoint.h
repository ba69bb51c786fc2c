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

struct CheckpointPosition {
  int64_t iteration = 0, consumed_samples = 0;
  nlohmann::json loss_scaler;  // --fp16's scaler state (LossScaler::state()), null otherwise
  int64_t skipped_nonfinite = 0;  // iterations skipped by --skip-nonfinite so far
  nlohmann::json data;            // the dataset trained on: {"documents": N, "tokens": T} (null in old checkpoints)
  // Validation samples read by the evaluations so far (Megatron's consumed_valid_samples);
  // -1 in a checkpoint from before it: Megatron's formula then stands in.
  int64_t consumed_valid_samples = -1;
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
void write_checkpoint_shard(const std::string& staging, const TrainOptions& opt, const ParallelLayout& layout,
                            const GptStage& stage, const AdamMoments& adam, CheckpointPosition pos);
void commit_checkpoint(const std::string& root, int64_t iteration);

// The saved run's options (to_json() form) of the latest checkpoint under root.
nlohmann::json read_checkpoint_config(const std::string& root);

// Loads the latest checkpoint into stage (and adam's whole-buffer moments
// unless null); refuses, with a one-line error, a checkpoint of another model
// shape or layout.
CheckpointPosition load_checkpoint(const std::string& root, const TrainOptions& opt, const ParallelLayout& layout,
                                   GptStage& stage, AdamMoments* adam);

}  // namespace occ
