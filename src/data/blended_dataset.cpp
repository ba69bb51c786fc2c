#include "data/blended_dataset.h"

#include <charconv>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/error.h"

namespace occ {

std::string DataBlend::describe() const {
  std::string s;
  for (size_t d = 0; d < prefixes.size(); ++d) {
    if (weighted) s += fmt::format("{}{:g} {}", d ? " " : "", weights[d], prefixes[d]);
    else s += fmt::format("{}{}", d ? " " : "", prefixes[d]);
  }
  return s;
}

namespace {
bool is_number(const std::string& w) {
  double value = 0;
  auto [end, ec] = std::from_chars(w.data(), w.data() + w.size(), value);
  return !w.empty() && ec == std::errc() && end == w.data() + w.size();
}
}  // namespace

DataBlend parse_data_blend(const std::vector<std::string>& words, const std::string& flag) {
  DataBlend blend;
  if (words.empty()) return blend;
  // Megatron's get_blend_from_list: an odd word count, or no word in a weight's
  // place that reads as a number, is prefixes without weights (each dataset's one
  // epoch, blended by its size: TrainingData); some numbers and some not is a typo.
  bool any_weight = false;
  for (size_t i = 0; i < words.size(); i += 2) any_weight = any_weight || is_number(words[i]);
  if (words.size() == 1 || !any_weight || (words.size() % 2 == 1 && !is_number(words[0]))) {
    blend.prefixes = words;
    blend.weights.assign(words.size(), 1.0);  // placeholders: the parts' sizes weigh them
    return blend;
  }
  const std::string fix = fmt::format(
      "give weight / prefix pairs such as {} 0.7 A 0.3 B, or prefixes alone (each dataset once, blended by size)", flag);
  std::vector<double> raw;
  for (size_t i = 0; i < words.size(); i += 2) {
    const std::string& w = words[i];
    double value = 0;
    std::from_chars(w.data(), w.data() + w.size(), value);
    OCC_CHECK(is_number(w),
              "{}: '{}' (word {} of {}) is not a weight; {}", flag, printable(w), i + 1, words.size(), fix);
    OCC_CHECK(std::isfinite(value) && value >= 0, "{}: weight {} of '{}' is negative or not finite; {}", flag,
              printable(w), i + 1 < words.size() ? printable(words[i + 1]) : std::string("?"), fix);
    OCC_CHECK(i + 1 < words.size(), "{}: weight {} has no prefix after it ({} words, an odd count); {}", flag,
              printable(w), words.size(), fix);
    OCC_CHECK(value > 0, "{}: weight 0 for '{}': Megatron's blends take positive weights only; leave the dataset out",
              flag, printable(words[i + 1]));
    raw.push_back(value);
    blend.prefixes.push_back(words[i + 1]);
  }
  blend.weights = normalize_weights(raw);
  blend.weighted = true;
  return blend;
}

CachedArrays blend_index_cache(const BlendSpec& spec, const std::string& folder) {
  const nlohmann::json key = {{"class", "BlendedDataset"},
                              {"indices", "megatron-core BlendedDataset (NVIDIA/Megatron-LM d98e8a64)"},
                              {"datasets", spec.parts},
                              {"split", spec.split},
                              {"weights", spec.weights},
                              {"size", spec.size}};
  return CachedArrays(folder, "BlendedDataset", spec.split, key);
}

void build_blend_index(const BlendSpec& spec, const std::vector<int64_t>& part_sizes, CachedArrays& cache,
                       std::string* note) {
  OCC_CHECK(part_sizes.size() == spec.weights.size(), "internal: a blend of {} weights over {} parts",
            spec.weights.size(), part_sizes.size());
  const std::string folder = cache.build_folder(note);
  NpyWriter dataset = cache.create(folder, "dataset_index", NpyType::Int16, {spec.size});
  NpyWriter sample = cache.create(folder, "dataset_sample_index", NpyType::Int64, {spec.size});
  build_blending_index(spec.weights, spec.size, dataset.data<int16_t>(), sample.data<int64_t>());
  std::vector<int64_t> counts(part_sizes.size(), 0);
  for (int64_t i = 0; i < spec.size; ++i) counts[size_t(dataset.data<int16_t>()[i])] += 1;
  for (size_t d = 0; d < counts.size(); ++d)
    OCC_CHECK(counts[d] <= part_sizes[d],
              "the {} blend asks dataset {} of its blend for {} samples, more than its {}; Megatron refuses this too "
              "(its mid_level_dataset_surplus): ask for more samples of every dataset, e.g. by a longer run",
              spec.split, d, counts[d], part_sizes[d]);
  dataset.commit();
  sample.commit();
  nlohmann::json c = nlohmann::json::array();
  for (int64_t n : counts) c.push_back(n);
  cache.finish(folder, {{"counts", c}});
}

BlendedDataset::BlendedDataset(std::vector<std::unique_ptr<GptDataset>> parts, std::optional<CachedArrays::Hit> index)
    : parts_(std::move(parts)), blended_(index.has_value()) {
  OCC_CHECK(!parts_.empty() && (blended_ || parts_.size() == 1), "internal: {} parts without a blending index",
            parts_.size());
  if (!blended_) return;
  try {
    dataset_index_ = std::move(index->arrays.at("dataset_index"));
    dataset_sample_index_ = std::move(index->arrays.at("dataset_sample_index"));
    const auto counts = index->result.at("counts").get<std::vector<int64_t>>();
    bool ok = counts.size() == parts_.size() && dataset_index_.type() == NpyType::Int16 &&
              dataset_sample_index_.type() == NpyType::Int64 &&
              dataset_index_.elements() == dataset_sample_index_.elements();
    for (size_t d = 0; ok && d < counts.size(); ++d) ok = counts[d] <= parts_[d]->size();
    OCC_CHECK(ok, "");
  } catch (const std::exception&) {
    fail("the data index cache's blending index in {} does not fit its datasets; delete it to rebuild", index->folder);
  }
}

int64_t BlendedDataset::size() const { return blended_ ? dataset_index_.elements() : parts_.front()->size(); }

int BlendedDataset::dataset_of(int64_t i) const {
  OCC_CHECK(i >= 0 && i < size(), "internal: sample {} out of range [0, {})", i, size());
  return blended_ ? int(dataset_index_.data<int16_t>()[i]) : 0;
}

void BlendedDataset::sample(int64_t i, int32_t* out) const {
  if (!blended_) return parts_.front()->sample(i, out);
  OCC_CHECK(i >= 0 && i < size(), "internal: sample {} out of range [0, {})", i, size());
  const int d = dataset_index_.data<int16_t>()[i];
  const int64_t k = dataset_sample_index_.data<int64_t>()[i];
  OCC_CHECK(d >= 0 && size_t(d) < parts_.size() && k >= 0 && k < parts_[size_t(d)]->size(),
            "the data index cache is corrupt: blend sample {} names sample {} of dataset {} (in {}); delete the "
            "cache's files to rebuild them",
            i, k, d, dataset_index_.path());
  parts_[size_t(d)]->sample(k, out);
}

}  // namespace occ
