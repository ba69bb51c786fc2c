#pragma once
// Reads every shard of a (possibly TP x PP sharded) checkpoint and reassembles
// the full model under the single-process parameter names, checking that
// TP-replicated tensors and the two copies of the tied word embedding are
// bit-identical. Used by `export` and `generate`.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/gpt.h"

namespace occ {

struct MergedTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

struct MergedCheckpoint {
  int64_t iteration = 0;
  nlohmann::json config;       // the saved run's TrainOptions::to_json()
  GptConfig model;             // the model it trained (padded vocabulary as saved)
  int tensor_parallel = 1, pipeline_parallel = 1;
  std::map<std::string, MergedTensor> tensors;  // single-process names, no LM-head copy
  double head_copy_diff = -1;  // max |diff| of the LM-head copy (PP > 1), else -1
};

// iteration < 0: the latest committed one.
MergedCheckpoint merge_checkpoint(const std::string& root, int64_t iteration = -1);

// --finetune: this rank's shard of `merged`'s weights (saved in any layout),
// sliced for the stage's own layout into stage.params(). Refuses, naming the
// field, a checkpoint of another model shape or architecture than `model`.
void load_merged_weights(const MergedCheckpoint& merged, const std::string& root, const GptConfig& model,
                         GptStage& stage);

}  // namespace occ
