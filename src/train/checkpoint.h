#pragma once
// What a rank saves and restores: its parameter shard, Adam moments and the
// training position, in ROOT/iter_NNNNNNN/mp_rank_TT_PPP/model_optim_rng.bin,
// committed atomically through CheckpointStore. Dropout and data order are
// pure functions of (seed, iteration, consumed samples), so they need no state.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/tensor_file.h"
#include "model/gpt.h"
#include "train/adamw.h"
#include "train/options.h"

namespace occ {

struct CheckpointPosition {
  int64_t iteration = 0, consumed_samples = 0;
  nlohmann::json loss_scaler;  // --fp16's scaler state (LossScaler::state()), null otherwise
  int64_t skipped_nonfinite = 0;  // iterations skipped by --skip-nonfinite so far
  nlohmann::json data;            // the dataset trained on: {"documents": N, "tokens": T} (null in old checkpoints)
};

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
// The shard file of this rank's (tp, pp) position in a staging or committed dir.
std::string checkpoint_shard_path(const std::string& dir, const ParallelLayout& layout);
// The shard's contents, copied to host memory now (to be written to checkpoint_shard_path);
// it keeps adam's vectors.
TensorFileWriter checkpoint_shard(const TrainOptions& opt, const ParallelLayout& layout, const GptStage& stage,
                                  AdamMoments adam, CheckpointPosition pos);
void commit_checkpoint(const std::string& root, int64_t iteration);

// The iteration a run with --load root (and --ckpt-step, when >= 0) resumes
// from: ckpt_step, or the latest; one-line error when there is none.
int64_t checkpoint_iteration_to_load(const std::string& root, int64_t ckpt_step);

// The saved run's options (to_json() form) of the latest checkpoint under root.
nlohmann::json read_checkpoint_config(const std::string& root);

// Loads the checkpoint opt.ckpt_step (the latest when < 0) into stage (and
// adam's whole-buffer moments unless null); refuses, with a one-line error, a
// checkpoint of another model shape or layout.
CheckpointPosition load_checkpoint(const std::string& root, const TrainOptions& opt, const ParallelLayout& layout,
                                   GptStage& stage, AdamMoments* adam);

}  // namespace occ
