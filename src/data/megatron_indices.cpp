#include "data/megatron_indices.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "data/indexed_dataset.h"

namespace occ {
namespace {

std::string trim_blanks(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// NumPy's pairwise_sum for float64 (numpy/_core/src/umath/loops_utils.h.src):
// below 8 values a plain loop; up to 128, eight running sums combined as a tree
// and the rest added in order; beyond, the two halves (a multiple of 8 first).
double pairwise_sum(const double* a, int64_t n) {
  if (n < 8) {
    double res = 0.0;
    for (int64_t i = 0; i < n; ++i) res += a[i];
    return res;
  }
  if (n <= 128) {
    double r[8];
    for (int j = 0; j < 8; ++j) r[j] = a[j];
    int64_t i = 8;
    for (; i < n - n % 8; i += 8)
      for (int j = 0; j < 8; ++j) r[j] += a[i + j];
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  int64_t n2 = n / 2;
  n2 -= n2 % 8;
  return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

}  // namespace

std::array<SplitBookends, 3> split_matrix(const std::string& split) {
  const char* kFix = "use 1 to 3 non-negative weights such as --split 949,50,1";
  std::vector<double> weights;
  size_t start = 0;
  while (true) {
    const size_t stop = split.find_first_of(",/", start);
    const std::string field =
        trim_blanks(split.substr(start, stop == std::string::npos ? std::string::npos : stop - start));
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
  OCC_CHECK(weights[0] + weights[1] + weights[2] > 0, "malformed --split '{}': all weights are zero; {}", split, kFix);
  const std::vector<double> w = normalize_weights(weights);
  // Running sums in float64, as Python adds them: [0, w0, w0 + w1, (w0 + w1) + w2].
  const double ends[4] = {0.0, w[0], w[0] + w[1], (w[0] + w[1]) + w[2]};
  std::array<SplitBookends, 3> matrix;
  for (int k = 0; k < 3; ++k)
    if (ends[k + 1] > ends[k]) matrix[size_t(k)] = std::make_pair(ends[k], ends[k + 1]);
  return matrix;
}

SequenceRange split_sequences(const std::pair<double, double>& bookends, int64_t num_sequences) {
  // int(round(x * float(N))): nearbyint rounds half to even in the default rounding mode.
  const double n = double(num_sequences);
  SequenceRange r{int64_t(std::nearbyint(bookends.first * n)), int64_t(std::nearbyint(bookends.second * n))};
  OCC_CHECK(0 <= r.begin && r.begin <= r.end && r.end <= num_sequences, "internal: split [{}, {}) of {} sequences",
            r.begin, r.end, num_sequences);
  return r;
}

double numpy_sum(const double* values, int64_t n) { return pairwise_sum(values, n); }

std::vector<double> normalize_weights(const std::vector<double>& weights) {
  const double sum = numpy_sum(weights.data(), int64_t(weights.size()));
  std::vector<double> out;
  out.reserve(weights.size());
  for (double w : weights) out.push_back(w / sum);
  return out;
}

int64_t blend_part_size(int64_t target, double weight, double surplus) {
  const double wanted = std::ceil(double(target) * weight);
  return int64_t(std::ceil(wanted * (1.0 + surplus)));
}

bool GptIndexPlan::sample_index_int64() const {
  return document_index_size() > int64_t(std::numeric_limits<int32_t>::max());
}

bool GptIndexPlan::shuffle_index_int64() const {
  return num_samples >= int64_t(std::numeric_limits<uint32_t>::max()) - 1;
}

GptIndexPlan plan_gpt_indices(int64_t tokens_per_epoch, int64_t num_sequences, int64_t requested_samples,
                              int seq_length, const std::string& what) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  OCC_CHECK(seq_length >= 1, "--seq-length must be at least 1, got {}", seq_length);
  OCC_CHECK(tokens_per_epoch >= 1,
            "{} holds no tokens over {} documents: no number of epochs gives a sample; adjust --split or the data",
            what, num_sequences);
  GptIndexPlan p;
  p.seq_length = seq_length;
  p.num_sequences = num_sequences;
  p.tokens_per_epoch = tokens_per_epoch;
  p.requested_samples = requested_samples;
  const int64_t L = seq_length;
  if (requested_samples >= 0) {
    // _get_num_epochs: epochs are added while their tokens < num_samples * L + 1.
    OCC_CHECK(requested_samples <= (kMax - 1) / L, "{}: {} samples of {} tokens overflow the index", what,
              requested_samples, L);
    const int64_t wanted = requested_samples * L + 1;
    p.num_epochs = std::max<int64_t>(1, wanted / tokens_per_epoch + (wanted % tokens_per_epoch != 0));
  }
  OCC_CHECK(p.num_epochs <= kMax / tokens_per_epoch && p.num_epochs <= kMax / std::max<int64_t>(num_sequences, 1),
            "{}: {} epochs of {} tokens overflow the index; use more data or fewer samples", what, p.num_epochs,
            tokens_per_epoch);
  p.num_samples = (p.num_epochs * tokens_per_epoch - 1) / L;
  if (p.num_epochs > 1) {
    p.samples_sans_final_epoch = ((p.num_epochs - 1) * tokens_per_epoch - 1) / L;
    const int64_t from_final_epoch = requested_samples - p.samples_sans_final_epoch;
    const int64_t per_epoch = (tokens_per_epoch - 1) / L;
    OCC_CHECK(from_final_epoch >= 0 && from_final_epoch <= per_epoch + 1,
              "internal: {} samples from the final epoch, {} per epoch", from_final_epoch, per_epoch);
    // int(0.80 * num_samples_per_epoch): the float64 product, truncated.
    p.separate_final_epoch = from_final_epoch < int64_t(0.80 * double(per_epoch));
  }
  return p;
}

void build_document_index(const GptIndexPlan& plan, SequenceRange range, NumpyRandomState& rng, int32_t* out) {
  OCC_CHECK(range.size() == plan.num_sequences && range.end <= std::numeric_limits<int32_t>::max(),
            "internal: document index over sequences [{}, {}) for a plan of {}", range.begin, range.end,
            plan.num_sequences);
  const int64_t n = plan.num_sequences;
  for (int64_t e = 0; e < plan.num_epochs; ++e)
    for (int64_t k = 0; k < n; ++k) out[e * n + k] = int32_t(range.begin + k);
  if (!plan.separate_final_epoch || plan.num_epochs == 1) {
    rng.shuffle(out, plan.num_epochs * n);
    return;
  }
  rng.shuffle(out, (plan.num_epochs - 1) * n);
  rng.shuffle(out + (plan.num_epochs - 1) * n, n);
}

template <class T>
void build_sample_index(const GptIndexPlan& plan, const IndexedDataset& ds, const int32_t* document_index, T* out) {
  // helpers.cpp build_sample_idx with add_extra_token_to_sequence and
  // drop_last_partial_sequence (Megatron's defaults for every split).
  const int64_t last = plan.document_index_size() - 1;
  const int64_t L = plan.seq_length;
  int64_t row = 0, position = 0, offset = 0;
  out[0] = 0;
  out[1] = 0;
  ++row;
  constexpr int64_t kAhead = 32;  // the document index is read in order, the sizes in its shuffled order
  for (int64_t p = 0; p < std::min(kAhead, last + 1); ++p) ds.prefetch_length(document_index[p]);
  while (row <= plan.num_samples) {
    int64_t remaining = L + 1;
    while (remaining != 0) {
      if (position + kAhead <= last) ds.prefetch_length(document_index[position + kAhead]);
      const int64_t length = ds.sequence_length(document_index[position]) - offset;
      remaining -= length;
      if (remaining <= 0) {
        offset += remaining + length - 1;
        remaining = 0;
      } else {
        OCC_CHECK(position != last, "internal: the sample index ran out of documents at sample {} of {}", row,
                  plan.num_samples);
        ++position;
        offset = 0;
      }
    }
    out[2 * row] = T(position);
    out[2 * row + 1] = T(offset);
    ++row;
  }
}

template <class T>
void build_shuffle_index(const GptIndexPlan& plan, NumpyRandomState& rng, T* out) {
  const int64_t first = plan.separate_final_epoch ? plan.samples_sans_final_epoch : plan.num_samples;
  for (int64_t i = 0; i < plan.num_samples; ++i) out[i] = T(i);
  rng.shuffle(out, first);
  if (first < plan.num_samples) rng.shuffle(out + first, plan.num_samples - first);
}

template void build_sample_index<int32_t>(const GptIndexPlan&, const IndexedDataset&, const int32_t*, int32_t*);
template void build_sample_index<int64_t>(const GptIndexPlan&, const IndexedDataset&, const int32_t*, int64_t*);
template void build_shuffle_index<uint32_t>(const GptIndexPlan&, NumpyRandomState&, uint32_t*);
template void build_shuffle_index<int64_t>(const GptIndexPlan&, NumpyRandomState&, int64_t*);

}  // namespace occ
