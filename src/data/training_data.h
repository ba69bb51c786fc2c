#pragma once
// The data of a training run: the train, validation and test sample streams, each
// a blend of datasets (data/blended_dataset.h), chosen with Megatron's flags:
//   --data-path BLEND [--split 949,50,1]: every dataset's documents split by --split,
//     its first part to train, the second to validation, the third to test, the
//     parts blended with the same weights (a dataset that --split leaves no
//     validation or test documents is left out of that set, the others' weights
//     renormalised; a set left without documents is not built, as Megatron's: no
//     evaluation on it). A part shorter than one sample repeats over epochs;
//   --train-data-path BLEND [--valid-data-path BLEND] [--test-data-path BLEND]: each
//     set its own datasets, used whole.
// Every dataset is opened once, its token ids checked against the vocabulary, and
// datasets made with different tokenizers are refused, naming the pair.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/blended_dataset.h"
#include "data/indexed_dataset.h"

namespace occ {

struct DataSpec {
  DataBlend data;                // --data-path (empty with the per-set flags)
  std::string split;             // --split, with --data-path
  DataBlend train, valid, test;  // --train-data-path, --valid-data-path, --test-data-path
  int seq_length = 0;
  uint64_t seed = 0;
  int vocab_size = 0;
  int64_t train_samples = 0;  // samples the training iterations take
  int64_t eval_samples = 0;   // samples one validation (or the test) evaluation takes; 0: neither runs
  int64_t global_batch_size = 1;  // (for messages: the largest --train-iters / --eval-iters that fit)
};

class TrainingData {
 public:
  explicit TrainingData(const DataSpec& spec);  // throws a one-line occ::Error
  TrainingData(const TrainingData&) = delete;
  TrainingData& operator=(const TrainingData&) = delete;

  const BlendedDataset& train() const { return *train_; }
  const BlendedDataset* valid() const { return valid_.get(); }  // null: no validation set
  const BlendedDataset* test() const { return test_.get(); }    // null: no test set
  // What a checkpoint records: {"documents", "tokens"} summed over the datasets (one
  // dataset: its own counts, as before blends), and the flags' blends, each a list of
  // {"prefix", "weight", "documents", "tokens"}: "data_path" and "split", or
  // "train_data_path" and those of "valid_data_path" and "test_data_path" given.
  const nlohmann::json& fingerprint() const { return fingerprint_; }
  // "" when a checkpoint's fingerprint names the same data (the same sets, weights
  // and datasets' document and token counts; a dataset moved elsewhere is the same);
  // else what differs, as "trained on ..., but ...".
  std::string difference(const nlohmann::json& saved) const;
  // One line for the start of a run: the sets, their datasets and weights.
  std::string describe() const;
  // What the run leaves out, one line each: a validation or test set without
  // documents (not built, as Megatron builds none: no evaluation on it), a
  // dataset left out of such a set's blend for want of documents there.
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  const IndexedDataset& open(const std::string& prefix);
  void check_tokenizers() const;
  // part: the --split part (0 train, 1 validation, 2 test), or -1 for a whole set of
  // the per-set flags; flag: the flag that named the blend (for notes).
  std::unique_ptr<BlendedDataset> build_set(const DataBlend& blend, int part, int64_t samples, const char* name,
                                            const char* flag);
  nlohmann::json blend_json(const DataBlend& blend) const;
  void check_index_fits(const DataBlend& blend, int64_t samples, const char* name) const;

  DataSpec spec_;
  bool split_mode_ = true;  // --data-path with --split
  std::vector<std::string> order_;  // prefixes in the order first named
  std::map<std::string, std::unique_ptr<IndexedDataset>> datasets_;
  std::unique_ptr<BlendedDataset> train_, valid_, test_;
  nlohmann::json fingerprint_;
  std::vector<std::string> notes_;
};

// The flags that made a fingerprint, for messages: "--data-path 0.7 A 0.3 B --split 949,50,1".
std::string describe_fingerprint(const nlohmann::json& fingerprint);

}  // namespace occ
