#pragma once
// The data of a training run: the train, validation and test sample streams, each
// a dataset on its own or a blend (data/blended_dataset.h), chosen with Megatron's
// flags and built as Megatron-core's BlendedMegatronDatasetBuilder builds them:
//   --data-path BLEND [--split 949,50,1]: every dataset's sequences split by --split
//     (bookends rounded as Megatron's), its first part to train, the second to
//     validation, the third to test, the parts blended with the same weights. A
//     split with no weight is none; one that rounds to no sequences is left out of
//     its set (a note says so; the others' weights renormalised), and a set left
//     with no dataset is not built (no evaluation on it);
//   --train-data-path BLEND [--valid-data-path BLEND] [--test-data-path BLEND]: each
//     set its own datasets, used whole.
// Each set is asked for Megatron's number of samples (DataSpec). Start-up costs
// the same whatever the corpus's size: the datasets are opened without a pass
// over them (their token ids are checked as samples are read), and the indices,
// built once per job into the data index cache (build_missing_indices), are
// mapped read-only (open()).
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/blended_dataset.h"
#include "data/indexed_dataset.h"

namespace occ {

// The engine's sample order. 1: per-epoch Philox shuffles (before issue 45);
// 2: Megatron-core's GPTDataset and BlendedDataset indices. Checkpoints record it.
constexpr int kDataOrder = 2;

struct DataSpec {
  DataBlend data;                // --data-path (empty with the per-set flags)
  std::string split;             // --split, with --data-path
  DataBlend train, valid, test;  // --train-data-path, --valid-data-path, --test-data-path
  int seq_length = 0;
  uint64_t seed = 0;             // below 2^32 (NumPy's RandomState)
  int vocab_size = 0;
  // Samples each set is asked for (Megatron's get_train_valid_test_num_samples);
  // a validation or test set asked for none is not built.
  int64_t train_samples = 0, valid_samples = 0, test_samples = 0;
  std::string cache_path;        // --data-cache-path ("": Megatron's default beside each dataset)
  // For messages (the largest value of a flag that fits): the flags the counts come from.
  int64_t global_batch_size = 1, eval_iters = 0;
  bool train_in_samples = false;  // --train-samples (else --train-iters)
};

class TrainingData {
 public:
  // Opens the datasets and decides every index (local, O(1) in the corpus's size);
  // throws a one-line occ::Error.
  explicit TrainingData(const DataSpec& spec);
  TrainingData(const TrainingData&) = delete;
  TrainingData& operator=(const TrainingData&) = delete;

  // Builds every index the cache lacks (or holds stale or corrupt): one rank of the
  // job, then the first rank of each node for node-local caches, the others waiting
  // (apps/commands/train.cpp). A set found is verified (its arrays' checksums), a
  // damaged one built again. Returns lines to print (a cache folder replaced, a
  // set built again).
  std::vector<std::string> build_missing_indices();
  // Maps every set's indices (each rank, after build_missing_indices() on its
  // node: the checksums are not verified again); throws if one is missing.
  void open();

  const BlendedDataset& train() const { return *train_; }
  const BlendedDataset* valid() const { return valid_.get(); }  // null: no validation set
  const BlendedDataset* test() const { return test_.get(); }    // null: no test set
  // What the run leaves out, one line each: a validation or test set without
  // documents (not built, as Megatron builds none: no evaluation on it), a
  // dataset left out of such a set's blend for want of documents there.
  const std::vector<std::string>& notes() const { return notes_; }
  // What a checkpoint records: {"documents", "tokens"} summed over the datasets,
  // "data_order" (kDataOrder), and the flags' blends, each a list of {"prefix",
  // "weight", "documents", "tokens"}: "data_path" and "split", or "train_data_path"
  // and those of "valid_data_path" and "test_data_path" given.
  const nlohmann::json& fingerprint() const { return fingerprint_; }
  // "" when a checkpoint's fingerprint names the same data (the same sets, weights
  // and datasets' document and token counts; a dataset moved elsewhere is the same);
  // else what differs, as "trained on ..., but ...".
  std::string difference(const nlohmann::json& saved) const;
  // "" when a checkpoint was trained in this build's sample order; else what it was.
  std::string order_difference(const nlohmann::json& saved) const;
  // One line for the start of a run: the sets, their datasets and weights (after open()).
  std::string describe() const;

 private:
  // A set to build: one dataset's part, or a blend of parts.
  struct SetPlan {
    std::string name;   // "train", "validation", "test"
    std::string split;  // Megatron's Split name: "train", "valid", "test"
    std::vector<GptDatasetSpec> parts;
    std::vector<CachedArrays> part_caches;
    bool blended = false;
    // A blend without weights: its weights and size come from its parts' sizes.
    bool unweighted = false;
    int64_t target_samples = 0;
    BlendSpec blend;
    std::vector<CachedArrays> blend_cache;  // one entry when blended
  };

  const IndexedDataset& open_dataset(const std::string& prefix);
  void check_tokenizers() const;
  std::unique_ptr<SetPlan> plan_set(const DataBlend& blend, int split_index, int64_t samples, const char* flag);
  // Refuses indices of `bytes` for `samples` samples of a set that `folder` has no room for.
  void check_room(const std::string& set, int64_t bytes, int64_t samples, const std::string& folder) const;
  std::string cache_folder(const std::string& prefix) const;
  // A blend without weights: weights, size and cache entry from its parts' sample counts.
  void resolve_unweighted_blend(SetPlan& plan, const std::vector<int64_t>& part_samples) const;
  std::unique_ptr<BlendedDataset> open_set(SetPlan& plan);
  nlohmann::json blend_json(const DataBlend& blend) const;

  DataSpec spec_;
  bool split_mode_ = true;  // --data-path with --split
  std::vector<std::string> order_;  // prefixes in the order first named
  std::map<std::string, std::unique_ptr<IndexedDataset>> datasets_;
  std::unique_ptr<SetPlan> train_plan_, valid_plan_, test_plan_;
  std::unique_ptr<BlendedDataset> train_, valid_, test_;
  std::vector<std::string> notes_;
  nlohmann::json fingerprint_;
};

// The flags that made a fingerprint, for messages: "--data-path 0.7 A 0.3 B --split 949,50,1".
std::string describe_fingerprint(const nlohmann::json& fingerprint);

}  // namespace occ
