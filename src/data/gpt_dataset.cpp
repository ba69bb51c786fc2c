#include "data/gpt_dataset.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"

namespace occ {
namespace {

// Key tags keep the document and sample shuffles independent streams.
constexpr uint64_t kDocumentShuffle = 0x646F63;  // "doc"
constexpr uint64_t kSampleShuffle = 0x736D70;    // "smp"

template <class T>
void shuffle_impl(T* data, int64_t n, uint64_t key) {
  for (int64_t i = n - 1; i > 0; --i) {
    auto b = Philox::block(key, 0, uint64_t(i));
    uint64_t r = (uint64_t(b[1]) << 32) | b[0];
    // Multiply-shift maps 64 random bits onto [0, i]; the bias (< i / 2^64) is negligible.
    int64_t j = int64_t((unsigned __int128)r * uint64_t(i + 1) >> 64);
    std::swap(data[i], data[j]);
  }
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

}  // namespace

void philox_shuffle(int64_t* data, int64_t n, uint64_t key) { shuffle_impl(data, n, key); }
void philox_shuffle(int32_t* data, int64_t n, uint64_t key) { shuffle_impl(data, n, key); }

int64_t max_samples_per_set(int seq_length) {
  const int64_t L = std::max(seq_length, 1);
  return std::min<int64_t>(int64_t(1) << 40, (std::numeric_limits<int64_t>::max() - 1) / L - 1);
}

std::array<SplitRange, 3> split_documents(int64_t num_documents, const std::string& split) {
  OCC_CHECK(num_documents >= 0, "internal: negative document count {}", num_documents);
  const char* kFix = "use 1 to 3 non-negative weights such as --split 949,50,1";
  std::vector<double> weights;
  size_t start = 0;
  while (true) {
    size_t stop = split.find_first_of(",/", start);
    std::string field = trim(split.substr(start, stop == std::string::npos ? std::string::npos : stop - start));
    double w = 0;
    auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), w);
    OCC_CHECK(!field.empty() && ec == std::errc() && end == field.data() + field.size(),
              "malformed --split '{}': '{}' is not a number; {}", split, field, kFix);
    OCC_CHECK(std::isfinite(w) && w >= 0, "malformed --split '{}': weight {} is negative or not finite; {}", split,
              field, kFix);
    weights.push_back(w);
    if (stop == std::string::npos) break;
    start = stop + 1;
  }
  OCC_CHECK(weights.size() <= 3, "malformed --split '{}': {} weights, at most 3 (train, validation, test); {}", split,
            weights.size(), kFix);
  weights.resize(3, 0.0);
  const double sum = weights[0] + weights[1] + weights[2];
  OCC_CHECK(sum > 0, "malformed --split '{}': all weights are zero; {}", split, kFix);

  // Megatron: index[k+1] = index[k] + round(w_k / sum * N) (Python's round is
  // half-to-even, as nearbyint in the default rounding mode), then every
  // index is shifted so the last one is N.
  std::array<int64_t, 4> index{};
  for (int k = 0; k < 3; ++k)
    index[k + 1] = index[k] + int64_t(std::nearbyint(weights[k] / sum * double(num_documents)));
  const int64_t diff = index[3] - num_documents;
  for (int k = 1; k < 4; ++k) index[k] -= diff;
  // The shift can push an early boundary below its predecessor; Megatron would
  // then produce a negative range, so clamp to keep every range well-formed.
  for (int k = 1; k < 4; ++k) index[k] = std::clamp(index[k], index[k - 1], num_documents);
  return {SplitRange{index[0], index[1]}, SplitRange{index[1], index[2]}, SplitRange{index[2], index[3]}};
}

GptDataset::GptDataset(const IndexedDataset& ds, SplitRange docs, int seq_length, int64_t num_samples, uint64_t seed,
                       const std::string& name)
    : ds_(&ds), seq_length_(seq_length) {
  const auto& doc_idx = ds.doc_idx();
  const int64_t num_docs = ds.num_documents();
  OCC_CHECK(seq_length >= 1, "--seq-length must be at least 1, got {}", seq_length);
  OCC_CHECK(docs.begin >= 0 && docs.begin <= docs.end && docs.end <= num_docs,
            "internal: {} split [{}, {}) is outside the {} documents of {}", name, docs.begin, docs.end, num_docs,
            ds.prefix());
  OCC_CHECK(docs.size() > 0, "{} split is empty: it gets 0 of the {} documents of {}; adjust --split", name, num_docs,
            ds.prefix());
  OCC_CHECK(ds.num_sequences() <= std::numeric_limits<int32_t>::max(),
            "{} has {} sequences, more than this loader's int32 index supports; split the dataset", ds.prefix(),
            ds.num_sequences());

  int64_t seqs_per_epoch = 0;
  for (int64_t d = docs.begin; d < docs.end; ++d)
    for (int64_t s = doc_idx[d]; s < doc_idx[d + 1]; ++s) {
      const int64_t len = ds.sequence_length(s);
      tokens_per_epoch_ += len;
      seqs_per_epoch += len > 0;
    }
  const int64_t L = seq_length;
  // A split shorter than one sample is fine (Megatron's GPTDataset): its documents
  // repeat over as many epochs as the samples need. Without a single token no
  // number of epochs would do (Megatron's epoch loop would never end).
  OCC_CHECK(tokens_per_epoch_ >= 1,
            "{} split has no tokens: its documents [{}, {}) of {} are all empty; adjust --split, or preprocess the "
            "corpus again",
            name, docs.begin, docs.end, ds.prefix());

  // Fewest epochs whose concatenation yields num_samples samples: a stream of
  // T tokens holds (T - 1) / L samples since neighbours share a token.
  OCC_CHECK(num_samples <= max_samples_per_set(seq_length),
            "internal: {} {} samples of {} tokens, more than the sample index holds ({})", num_samples, name, L,
            max_samples_per_set(seq_length));
  int64_t epochs = 1;
  if (num_samples > 0) epochs = std::max<int64_t>(1, (num_samples * L + 1 + tokens_per_epoch_ - 1) / tokens_per_epoch_);
  OCC_CHECK(epochs <= std::numeric_limits<int>::max(), "{} samples need {} epochs of the {} split; use more data",
            num_samples, epochs, name);
  num_epochs_ = int(epochs);

  // Document order: a fresh Philox-keyed permutation per epoch, each document
  // expanded into its (non-empty) sequences.
  std::vector<int64_t> perm(size_t(docs.size()));
  order_.reserve(size_t(seqs_per_epoch * epochs));
  for (int64_t e = 0; e < epochs; ++e) {
    std::iota(perm.begin(), perm.end(), docs.begin);
    shuffle_impl(perm.data(), int64_t(perm.size()), make_key(seed, kDocumentShuffle, uint64_t(e)));
    for (int64_t d : perm)
      for (int64_t s = doc_idx[d]; s < doc_idx[d + 1]; ++s)
        if (ds.sequence_length(s) > 0) order_.push_back(int32_t(s));
  }

  // Sample index: sample k starts at token k * L of the stream.
  const int64_t total_samples = (tokens_per_epoch_ * epochs - 1) / L;
  sample_pos_.resize(size_t(total_samples));
  sample_off_.resize(size_t(total_samples));
  int64_t pos = 0, pos_start = 0;  // order_[pos] begins at stream token pos_start
  for (int64_t k = 0; k < total_samples; ++k) {
    const int64_t target = k * L;
    while (pos_start + ds.sequence_length(order_[size_t(pos)]) <= target)
      pos_start += ds.sequence_length(order_[size_t(pos++)]);
    sample_pos_[size_t(k)] = pos;
    sample_off_[size_t(k)] = int32_t(target - pos_start);
  }

  shuffle_.resize(size_t(total_samples));
  std::iota(shuffle_.begin(), shuffle_.end(), int64_t(0));
  shuffle_impl(shuffle_.data(), total_samples, make_key(seed, kSampleShuffle));
}

void GptDataset::sample(int64_t i, int32_t* out) const {
  OCC_CHECK(i >= 0 && i < size(), "internal: sample {} out of range [0, {})", i, size());
  const int64_t k = shuffle_[size_t(i)];
  int64_t pos = sample_pos_[size_t(k)];
  int64_t offset = sample_off_[size_t(k)];
  int64_t need = int64_t(seq_length_) + 1;
  while (need > 0) {
    const int32_t seq = order_[size_t(pos)];
    const int64_t take = std::min(need, ds_->sequence_length(seq) - offset);
    ds_->read(seq, offset, take, out);
    out += take;
    need -= take;
    ++pos;
    offset = 0;
  }
}

void MicroBatchTokens::read(const SampleSource& data, int64_t first_sample, int B, size_t slot) {
  const int T = data.seq_length();
  sample_.resize(size_t(T + 1));
  inputs_[slot].resize(size_t(B) * T);
  labels_[slot].resize(size_t(B) * T);
  for (int b = 0; b < B; ++b) {
    data.sample(first_sample + b, sample_.data());
    std::copy(sample_.begin(), sample_.end() - 1, inputs_[slot].begin() + b * T);
    std::copy(sample_.begin() + 1, sample_.end(), labels_[slot].begin() + b * T);
  }
}

}  // namespace occ
