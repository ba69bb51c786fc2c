#pragma once
// GPT training samples over an indexed dataset, exactly as Megatron-core's
// GPTDataset makes them (data/megatron_indices.h): a split's sequences repeated
// over as many epochs as the requested samples need, shuffled with NumPy's
// RandomState(seed), cut into samples of seq_length + 1 tokens (neighbours share
// a boundary token: inputs = tokens[:-1], labels = tokens[1:]) and read in a
// shuffled order. The three indices are built once into the data index cache
// (data/index_cache.h) and mapped here; they depend on the seed and the data
// flags only, never on the process layout.
#include <cstdint>
#include <string>

#include "data/index_cache.h"
#include "data/indexed_dataset.h"
#include "data/megatron_indices.h"

namespace occ {

// One dataset's part of a set: what its indices depend on.
struct GptDatasetSpec {
  std::string prefix;           // the dataset, as the flags name it
  SequenceRange range;          // the split's sequences
  int64_t num_samples = -1;     // samples asked for (-1: one epoch, Megatron's None)
  std::string split = "train";  // "train", "valid" or "test" (Megatron's Split names)
  int seq_length = 0;
  uint32_t seed = 0;
  // "the train split of PREFIX (sequences [b, e))", for messages.
  std::string describe() const;
  // The set it belongs to: "train", "validation" or "test".
  std::string set_name() const { return split == "valid" ? "validation" : split; }
};

// The most samples one set (train, validation or test) may ask for: 2^40, and
// fewer where that many samples of seq_length tokens would overflow a 64-bit
// token position. (The disk the indices need is checked when they are built.)
int64_t max_samples_per_set(int seq_length);

// The cache entry of a part's indices in `folder`.
CachedArrays gpt_index_cache(const GptDatasetSpec& spec, const std::string& folder);
// What its indices will hold, after checking the whole .idx (IndexedDataset::validate)
// and counting the split's tokens; a split whose documents hold none is refused.
GptIndexPlan plan_gpt_part(const GptDatasetSpec& spec, const IndexedDataset& ds);
// The bytes of the three .npy files of a plan.
int64_t gpt_index_bytes(const GptIndexPlan& plan);
// Builds them into the cache; `note` is set when the cache folder could not be
// written and a temporary one was used.
void build_gpt_indices(const GptDatasetSpec& spec, const IndexedDataset& ds, const GptIndexPlan& plan,
                       CachedArrays& cache, std::string* note);

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
  // Over the indices of a cache hit (checked against the spec's plan). Token ids
  // at or above vocab_size are refused when read, naming the dataset, the
  // document and the id. `ds` must outlive this object.
  GptDataset(const IndexedDataset& ds, const GptDatasetSpec& spec, CachedArrays::Hit indices, int vocab_size);

  int64_t size() const override { return plan_.num_samples; }
  int seq_length() const override { return plan_.seq_length; }
  void sample(int64_t i, int32_t* out) const override;
  const GptIndexPlan& plan() const { return plan_; }
  const GptDatasetSpec& spec() const { return spec_; }
  // The mapped indices (tests compare them with Megatron's).
  const NpyArray& document_index() const { return document_; }
  const NpyArray& sample_index() const { return sample_; }
  const NpyArray& shuffle_index() const { return shuffle_; }

 private:
  // Sample i read `what` out of range from the array `where`.
  [[noreturn]] void corrupt(int64_t i, const std::string& what, const NpyArray& where) const;

  const IndexedDataset* ds_;
  GptDatasetSpec spec_;
  int vocab_size_;
  GptIndexPlan plan_;
  NpyArray document_, sample_, shuffle_;
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

}  // namespace occ
