#pragma once
// Blends of datasets as Megatron mixes corpora: `--data-path 0.7 web 0.2 code 0.1
// books`. As Megatron's BlendedMegatronDatasetBuilder: the weights are
// normalised, each dataset's part is asked for ceil(ceil(target x weight) x
// 1.005) samples (its surplus), and the blend holds the sum of the unpadded
// ceil(target x weight); its index (helpers.cpp build_blending_indices, data/
// megatron_indices.h) sends global sample i to the dataset furthest below its
// share, as that dataset's next sample. The index is built once into the data
// index cache and mapped, as the parts' are.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/gpt_dataset.h"

namespace occ {

// What --data-path (or --train-data-path, ...) names: one prefix, weight /
// prefix pairs, or prefixes without weights (Megatron: each dataset's one epoch,
// blended by their sizes). `weights` are normalised as Megatron's normalize
// (numpy's sum); without weights they are placeholders (1 each).
struct DataBlend {
  std::vector<std::string> prefixes;
  std::vector<double> weights;
  // Whether the flag gave weights ("1.0 A" is a blend of one dataset to
  // Megatron, "A" a dataset on its own: their sample counts differ).
  bool weighted = false;

  bool empty() const { return prefixes.empty(); }
  // Several prefixes without weights ("A B").
  bool unweighted() const { return !weighted && prefixes.size() > 1; }
  size_t size() const { return prefixes.size(); }
  // As the flag's words: "PREFIX", "0.7 A 0.3 B" (normalised weights) or "A B".
  std::string describe() const;
};

// Parses the words of `flag` (Megatron's get_blend_from_list): a single PREFIX,
// W1 P1 W2 P2 ... with positive weights, or P1 P2 ... without weights (an odd
// count not starting with a number, or no number in a weight's place). Throws a
// one-line occ::Error for weights mixed with non-numbers, a negative or zero
// weight, or a weight without its prefix. No words: an empty blend.
DataBlend parse_data_blend(const std::vector<std::string>& words, const std::string& flag);

// A blend's index: what it depends on (its parts' cache keys, weights, size).
struct BlendSpec {
  std::string split;               // "train", "valid", "test"
  std::vector<nlohmann::json> parts;  // each part's GPTDataset cache key
  std::vector<double> weights;     // as build_blending_indices takes them (normalised again)
  int64_t size = 0;
};
CachedArrays blend_index_cache(const BlendSpec& spec, const std::string& folder);
// Builds it into the cache; part_sizes[d] is part d's sample count: a blend that
// asks a part for more is refused, as Megatron refuses it.
void build_blend_index(const BlendSpec& spec, const std::vector<int64_t>& part_sizes, CachedArrays& cache,
                       std::string* note);

// Samples [0, size()) of a set: one part on its own, or a blend whose sample i is
// sample dataset_sample_index[i] of part dataset_index[i].
class BlendedDataset : public SampleSource {
 public:
  // `index`: the blend's cached index; none for a part on its own.
  BlendedDataset(std::vector<std::unique_ptr<GptDataset>> parts, std::optional<CachedArrays::Hit> index);

  int64_t size() const override;
  int seq_length() const override { return parts_.front()->seq_length(); }
  void sample(int64_t i, int32_t* out) const override;
  const GptDataset& part(size_t d) const { return *parts_[d]; }
  size_t num_parts() const { return parts_.size(); }
  // Which part sample i comes from (0 without a blend).
  int dataset_of(int64_t i) const;
  bool blended() const { return blended_; }
  // The mapped blending index (empty without a blend).
  const NpyArray& dataset_index() const { return dataset_index_; }
  const NpyArray& dataset_sample_index() const { return dataset_sample_index_; }

 private:
  std::vector<std::unique_ptr<GptDataset>> parts_;
  bool blended_ = false;
  NpyArray dataset_index_, dataset_sample_index_;
};

}  // namespace occ
