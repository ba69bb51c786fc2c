#pragma once
// Blends of datasets as Megatron mixes corpora: `--data-path 0.7 web 0.2 code 0.1
// books` (weights normalised). Megatron's blending rule places the samples: global
// sample i goes to the dataset whose count falls furthest below its share,
// weight_d * max(i, 1) - count_d (the first dataset on ties), and is that dataset's
// next sample. So the same weights give Megatron's mix, every dataset's share
// stays within one sample of weight x n at every n, and each dataset is sampled as
// on its own (GptDataset: a pure function of the seed, never of the layout).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/gpt_dataset.h"

namespace occ {

// What --data-path (or --train-data-path, ...) names: one prefix (weight 1), or
// weight / prefix pairs. Weights are normalised to sum 1.
struct DataBlend {
  std::vector<std::string> prefixes;
  std::vector<double> weights;

  bool empty() const { return prefixes.empty(); }
  size_t size() const { return prefixes.size(); }
  // As the flag's words: "PREFIX", or "0.7 A 0.3 B" (normalised weights).
  std::string describe() const;
};

// Parses the words of `flag` (Megatron's forms): a single PREFIX, or W1 P1 W2 P2 ...
// with non-negative weights of positive sum. Throws a one-line occ::Error for a
// weight that is not a number or is negative, an odd word count, a weight without
// its prefix, or weights that sum to zero. No words: an empty blend.
DataBlend parse_data_blend(const std::vector<std::string>& words, const std::string& flag);

// Megatron's blending index of n samples (build_blending_indices): which dataset
// each sample comes from and its index there; counts[d] samples of dataset d in all.
// One dataset: only counts (sample i is its sample i).
struct BlendingIndex {
  std::vector<uint16_t> dataset;
  std::vector<int64_t> sample;
  std::vector<int64_t> counts;
};
BlendingIndex build_blending_index(const std::vector<double>& weights, int64_t n);

// Samples [0, size()) of a blend: sample i is sample index.sample[i] of
// part index.dataset[i]. One part: the part itself, unchanged.
class BlendedDataset : public SampleSource {
 public:
  // parts[d] must hold at least index.counts[d] samples.
  BlendedDataset(std::vector<std::unique_ptr<GptDataset>> parts, BlendingIndex index);

  int64_t size() const override;
  int seq_length() const override { return parts_.front()->seq_length(); }
  void sample(int64_t i, int32_t* out) const override;
  const GptDataset& part(size_t d) const { return *parts_[d]; }
  size_t num_parts() const { return parts_.size(); }
  // Which part sample i comes from (0 with one part).
  int dataset_of(int64_t i) const;

 private:
  std::vector<std::unique_ptr<GptDataset>> parts_;
  BlendingIndex index_;
};

}  // namespace occ
