#include "data/blended_dataset.h"

#include <charconv>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/error.h"

namespace occ {

std::string DataBlend::describe() const {
  if (prefixes.size() == 1 && weights.size() == 1 && weights[0] == 1.0) return prefixes[0];
  std::string s;
  for (size_t d = 0; d < prefixes.size(); ++d) s += fmt::format("{}{:g} {}", d ? " " : "", weights[d], prefixes[d]);
  return s;
}

DataBlend parse_data_blend(const std::vector<std::string>& words, const std::string& flag) {
  DataBlend blend;
  if (words.empty()) return blend;
  if (words.size() == 1) {
    blend.prefixes = {words[0]};
    blend.weights = {1.0};
    return blend;
  }
  const std::string fix = fmt::format("give one PREFIX, or weight / prefix pairs such as {} 0.7 A 0.3 B", flag);
  std::vector<double> raw;
  double sum = 0;
  for (size_t i = 0; i < words.size(); i += 2) {
    const std::string& w = words[i];
    double value = 0;
    auto [end, ec] = std::from_chars(w.data(), w.data() + w.size(), value);
    OCC_CHECK(!w.empty() && ec == std::errc() && end == w.data() + w.size(),
              "{}: '{}' (word {} of {}) is not a weight; {}", flag, printable(w), i + 1, words.size(), fix);
    OCC_CHECK(std::isfinite(value) && value >= 0, "{}: weight {} of '{}' is negative or not finite; {}", flag,
              printable(w), i + 1 < words.size() ? printable(words[i + 1]) : std::string("?"), fix);
    OCC_CHECK(i + 1 < words.size(), "{}: weight {} has no prefix after it ({} words, an odd count); {}", flag,
              printable(w), words.size(), fix);
    raw.push_back(value);
    sum += value;
    blend.prefixes.push_back(words[i + 1]);
  }
  OCC_CHECK(sum > 0, "{}: the weights sum to zero; {}", flag, fix);
  // Normalised as Megatron does (each weight / the sum, in double).
  for (double w : raw) blend.weights.push_back(w / sum);
  return blend;
}

BlendingIndex build_blending_index(const std::vector<double>& weights, int64_t n) {
  const size_t D = weights.size();
  OCC_CHECK(D >= 1 && D <= std::numeric_limits<uint16_t>::max(), "a blend of {} datasets: give 1 to 65535", D);
  OCC_CHECK(n >= 0, "internal: a blending index of {} samples", n);
  BlendingIndex index;
  index.counts.assign(D, 0);
  if (D == 1) {  // every sample is the dataset's own: no index to keep
    index.counts[0] = n;
    return index;
  }
  index.dataset.resize(size_t(n));
  index.sample.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    // The dataset furthest below its share; the first on ties (strictly greater wins).
    const double at = std::max(double(i), 1.0);
    size_t best = 0;
    double best_error = weights[0] * at - double(index.counts[0]);
    for (size_t d = 1; d < D; ++d) {
      const double error = weights[d] * at - double(index.counts[d]);
      if (error > best_error) best_error = error, best = d;
    }
    index.dataset[size_t(i)] = uint16_t(best);
    index.sample[size_t(i)] = index.counts[best]++;
  }
  return index;
}

BlendedDataset::BlendedDataset(std::vector<std::unique_ptr<GptDataset>> parts, BlendingIndex index)
    : parts_(std::move(parts)), index_(std::move(index)) {
  OCC_CHECK(!parts_.empty() && index_.counts.size() == parts_.size(), "internal: a blend of {} parts, {} counts",
            parts_.size(), index_.counts.size());
  for (size_t d = 0; d < parts_.size(); ++d)
    OCC_CHECK(parts_[d]->size() >= index_.counts[d], "internal: part {} holds {} samples, the blend takes {}", d,
              parts_[d]->size(), index_.counts[d]);
  OCC_CHECK(parts_.front()->seq_length() > 0, "internal: a blend of samples of length 0");
}

int64_t BlendedDataset::size() const {
  return parts_.size() == 1 ? parts_.front()->size() : int64_t(index_.dataset.size());
}

int BlendedDataset::dataset_of(int64_t i) const {
  OCC_CHECK(i >= 0 && i < size(), "internal: sample {} out of range [0, {})", i, size());
  return parts_.size() == 1 ? 0 : int(index_.dataset[size_t(i)]);
}

void BlendedDataset::sample(int64_t i, int32_t* out) const {
  if (parts_.size() == 1) return parts_.front()->sample(i, out);
  OCC_CHECK(i >= 0 && i < size(), "internal: sample {} out of range [0, {})", i, size());
  parts_[index_.dataset[size_t(i)]]->sample(index_.sample[size_t(i)], out);
}

}  // namespace occ
