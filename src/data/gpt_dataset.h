#pragma once
// GPT training samples over an indexed dataset, built as Megatron does: the
// documents of a split are shuffled per epoch, concatenated into one token
// stream, and cut into samples of seq_length + 1 tokens, consecutive samples
// sharing one boundary token (inputs = tokens[:-1], labels = tokens[1:]); a
// final seeded shuffle orders the samples. Every order is keyed by the seed
// alone (counter-based Philox), so it never depends on the process layout.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "data/indexed_dataset.h"

namespace occ {

// Documents [begin, end) of a dataset.
struct SplitRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// Parses a Megatron --split string ("949,50,1", "98,2,0", "100", "0.9/0.1"):
// 1 to 3 non-negative weights separated by ',' or '/', normalised; missing
// weights are 0. Ranges are rounded as Megatron's get_train_valid_test_split_
// (each share rounded half-to-even, then shifted so the last end is exactly
// num_documents), kept monotone. Returns train, validation, test.
std::array<SplitRange, 3> split_documents(int64_t num_documents, const std::string& split);

// The most samples one set (train, validation or test) may ask for: 2^40, and
// fewer where that many samples of seq_length tokens would overflow a 64-bit
// token position. (The memory the index needs is checked when it is built.)
int64_t max_samples_per_set(int seq_length);

// Where a run's samples come from: seq_length + 1 tokens each, indexed [0, size()).
class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual int64_t size() const = 0;
  virtual int seq_length() const = 0;
  // Writes the seq_length + 1 tokens of sample i (0 <= i < size()).
  virtual void sample(int64_t i, int32_t* out) const = 0;
};

class GptDataset : public SampleSource {
 public:
  // Builds enough epochs to provide at least `num_samples` samples
  // (num_samples <= 0: exactly one epoch), however few tokens the split holds:
  // a split shorter than one sample repeats its documents over several epochs,
  // as Megatron's. Refuses a split without documents, or without tokens.
  // `name` ("train", "validation", "test") only labels error messages. `ds`
  // must outlive this object.
  GptDataset(const IndexedDataset& ds, SplitRange docs, int seq_length, int64_t num_samples, uint64_t seed,
             const std::string& name = "train");

  // Samples available over all built epochs (>= num_samples).
  int64_t size() const override { return int64_t(shuffle_.size()); }
  int seq_length() const override { return seq_length_; }
  int num_epochs() const { return num_epochs_; }
  int64_t tokens_per_epoch() const { return tokens_per_epoch_; }
  // Writes the seq_length + 1 tokens of sample i (0 <= i < size()).
  void sample(int64_t i, int32_t* out) const override;

 private:
  const IndexedDataset* ds_;
  int seq_length_;
  int num_epochs_ = 0;
  int64_t tokens_per_epoch_ = 0;
  std::vector<int32_t> order_;       // non-empty sequence ids, epoch after epoch
  std::vector<int64_t> sample_pos_;  // sample start: position in order_ ...
  std::vector<int32_t> sample_off_;  // ... and token offset within that sequence
  std::vector<int64_t> shuffle_;     // sample i -> unshuffled sample index
};

// The tokens of the micro-batches in flight, one slot each: B samples'
// inputs (tokens[:-1]) and labels (tokens[1:]), [B, seq_length] row-major.
class MicroBatchTokens {
 public:
  void resize(size_t slots) {
    inputs_.resize(slots);
    labels_.resize(slots);
  }
  size_t slots() const { return inputs_.size(); }
  // Reads samples [first_sample, first_sample + B) of `data` into `slot`.
  void read(const SampleSource& data, int64_t first_sample, int B, size_t slot);
  // Empty (possibly null) until the slot is read.
  const int32_t* inputs(size_t slot) const { return inputs_[slot].data(); }
  const int32_t* labels(size_t slot) const { return labels_[slot].data(); }

 private:
  std::vector<std::vector<int32_t>> inputs_, labels_;
  std::vector<int32_t> sample_;  // one sample: seq_length + 1 tokens
};

// In-place Fisher-Yates shuffle driven by Philox under `key`; exposed for tests.
void philox_shuffle(int64_t* data, int64_t n, uint64_t key);
void philox_shuffle(int32_t* data, int64_t n, uint64_t key);

}  // namespace occ
