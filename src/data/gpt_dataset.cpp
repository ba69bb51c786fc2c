#include "data/gpt_dataset.h"

#include <algorithm>
#include <filesystem>
#include <limits>

#include <fmt/format.h>

#include "core/error.h"

namespace occ {
namespace {

// The code the indices reproduce: a cache of other indices is never a hit.
constexpr const char* kGptIndices = "megatron-core GPTDataset (NVIDIA/Megatron-LM d98e8a64)";

nlohmann::json plan_json(const GptIndexPlan& p) {
  return {{"seq_length", p.seq_length},
          {"num_sequences", p.num_sequences},
          {"tokens_per_epoch", p.tokens_per_epoch},
          {"requested_samples", p.requested_samples},
          {"num_epochs", p.num_epochs},
          {"separate_final_epoch", p.separate_final_epoch},
          {"samples_sans_final_epoch", p.samples_sans_final_epoch},
          {"num_samples", p.num_samples}};
}

GptIndexPlan plan_from_json(const nlohmann::json& j) {
  GptIndexPlan p;
  p.seq_length = j.at("seq_length").get<int>();
  p.num_sequences = j.at("num_sequences").get<int64_t>();
  p.tokens_per_epoch = j.at("tokens_per_epoch").get<int64_t>();
  p.requested_samples = j.at("requested_samples").get<int64_t>();
  p.num_epochs = j.at("num_epochs").get<int64_t>();
  p.separate_final_epoch = j.at("separate_final_epoch").get<bool>();
  p.samples_sans_final_epoch = j.at("samples_sans_final_epoch").get<int64_t>();
  p.num_samples = j.at("num_samples").get<int64_t>();
  return p;
}

}  // namespace

std::string GptDatasetSpec::describe() const {
  return fmt::format("the {} split of {} (sequences [{}, {}))", split, prefix, range.begin, range.end);
}

CachedArrays gpt_index_cache(const GptDatasetSpec& spec, const std::string& folder) {
  std::error_code ec;
  const std::string where = std::filesystem::weakly_canonical(spec.prefix, ec).string();
  const nlohmann::json key = {{"class", "GPTDataset"},
                              {"indices", kGptIndices},
                              {"dataset", ec ? spec.prefix : where},
                              {"idx", file_version(spec.prefix + ".idx")},
                              {"sequences", {spec.range.begin, spec.range.end}},
                              {"num_samples", spec.num_samples},
                              {"index_split", spec.split},
                              {"sequence_length", spec.seq_length},
                              {"random_seed", spec.seed},
                              {"add_extra_token_to_sequence", true},
                              {"drop_last_partial_sequence", true}};
  return CachedArrays(folder, "GPTDataset", spec.split, key);
}

int64_t max_samples_per_set(int seq_length) {
  const int64_t L = std::max(seq_length, 1);
  return std::min<int64_t>(int64_t(1) << 40, (std::numeric_limits<int64_t>::max() - 1) / L - 1);
}

GptIndexPlan plan_gpt_part(const GptDatasetSpec& spec, const IndexedDataset& ds) {
  ds.validate();
  OCC_CHECK(spec.range.begin >= 0 && spec.range.begin <= spec.range.end && spec.range.end <= ds.num_sequences(),
            "internal: {} of a dataset of {} sequences", spec.describe(), ds.num_sequences());
  OCC_CHECK(ds.num_sequences() <= std::numeric_limits<int32_t>::max(),
            "{} has {} sequences, more than Megatron's int32 document index holds; split the dataset", spec.prefix,
            ds.num_sequences());
  int64_t tokens = 0;
  for (int64_t s = spec.range.begin; s < spec.range.end; ++s) tokens += ds.sequence_length(s);
  // A split shorter than one sample repeats over epochs; without a single token no number
  // of them would do (Megatron's epoch loop would never end).
  OCC_CHECK(tokens > 0,
            "{} split has no tokens: its documents [{}, {}) of {} are all empty; adjust --split, or preprocess the "
            "corpus again",
            spec.set_name(), spec.range.begin, spec.range.end, spec.prefix);
  return plan_gpt_indices(tokens, spec.range.size(), spec.num_samples, spec.seq_length, spec.describe());
}

int64_t gpt_index_bytes(const GptIndexPlan& plan) {
  const int64_t header = 128;  // each .npy's header, at most
  return 3 * header + 4 * plan.document_index_size() + (plan.num_samples + 1) * 2 * (plan.sample_index_int64() ? 8 : 4) +
         plan.num_samples * (plan.shuffle_index_int64() ? 8 : 4);
}

void build_gpt_indices(const GptDatasetSpec& spec, const IndexedDataset& ds, const GptIndexPlan& plan,
                       CachedArrays& cache, std::string* note) {
  const std::string folder = cache.build_folder(note);
  NumpyRandomState rng(spec.seed);
  NpyWriter document = cache.create(folder, "document_index", NpyType::Int32, {plan.document_index_size()});
  build_document_index(plan, spec.range, rng, document.data<int32_t>());
  const std::vector<int64_t> rows = {plan.num_samples + 1, 2};
  NpyWriter sample = cache.create(folder, "sample_index", plan.sample_index_int64() ? NpyType::Int64 : NpyType::Int32, rows);
  if (plan.sample_index_int64())
    build_sample_index(plan, ds, document.data<int32_t>(), sample.data<int64_t>());
  else
    build_sample_index(plan, ds, document.data<int32_t>(), sample.data<int32_t>());
  NpyWriter shuffle =
      cache.create(folder, "shuffle_index", plan.shuffle_index_int64() ? NpyType::Int64 : NpyType::UInt32, {plan.num_samples});
  if (plan.shuffle_index_int64())
    build_shuffle_index(plan, rng, shuffle.data<int64_t>());
  else
    build_shuffle_index(plan, rng, shuffle.data<uint32_t>());
  document.commit();
  sample.commit();
  shuffle.commit();
  cache.finish(folder, plan_json(plan));
}

GptDataset::GptDataset(const IndexedDataset& ds, const GptDatasetSpec& spec, CachedArrays::Hit indices, int vocab_size)
    : ds_(&ds), spec_(spec), vocab_size_(vocab_size) {
  try {
    plan_ = plan_from_json(indices.result);
    document_ = std::move(indices.arrays.at("document_index"));
    sample_ = std::move(indices.arrays.at("sample_index"));
    shuffle_ = std::move(indices.arrays.at("shuffle_index"));
  } catch (const std::exception&) {
    fail("the data index cache in {} has an incomplete description of {}; delete it to rebuild", indices.folder,
         spec.describe());
  }
  // Each array checked on its own, so that a message names the one that does not fit.
  const NpyArray* misfit =
      !(document_.type() == NpyType::Int32 && document_.elements() == plan_.document_index_size()) ? &document_
      : !(sample_.type() == (plan_.sample_index_int64() ? NpyType::Int64 : NpyType::Int32) &&
          sample_.shape() == std::vector<int64_t>{plan_.num_samples + 1, 2} && sample_.at(0) == 0 && sample_.at(1) == 0)
          ? &sample_
      : !(shuffle_.type() == (plan_.shuffle_index_int64() ? NpyType::Int64 : NpyType::UInt32) &&
          shuffle_.elements() == plan_.num_samples)
          ? &shuffle_
          : nullptr;
  if (!misfit && (plan_.seq_length != spec.seq_length || plan_.num_sequences != spec.range.size())) misfit = &sample_;
  OCC_CHECK(!misfit, "the data index cache's {} does not hold the indices of {}; delete it to rebuild", misfit->path(),
            spec.describe());
}

void GptDataset::corrupt(int64_t i, const std::string& what, const NpyArray& where) const {
  fail("the data index cache is corrupt: sample {} of {} has {} (in {}); delete the cache's files to rebuild them", i,
       spec_.describe(), what, where.path());
}

void GptDataset::sample(int64_t i, int32_t* out) const {
  OCC_CHECK(i >= 0 && i < size(), "internal: sample {} out of range [0, {})", i, size());
  const int64_t row = shuffle_.at(i);
  if (row < 0 || row >= plan_.num_samples) corrupt(i, fmt::format("shuffle index entry {}", row), shuffle_);
  const int64_t first = sample_.at(2 * row), first_offset = sample_.at(2 * row + 1);
  const int64_t last = sample_.at(2 * row + 2), last_offset = sample_.at(2 * row + 3);
  if (first < 0 || first > last || last >= document_.elements())
    corrupt(i, fmt::format("documents [{}, {}]", first, last), sample_);
  const int64_t want = int64_t(plan_.seq_length) + 1;
  int64_t done = 0;
  for (int64_t pos = first; pos <= last; ++pos) {
    const int64_t seq = document_.data<int32_t>()[pos];
    if (seq < spec_.range.begin || seq >= spec_.range.end) corrupt(i, fmt::format("sequence {}", seq), document_);
    const int64_t length = ds_->sequence_length(seq);
    const int64_t offset = pos == first ? first_offset : 0;
    const int64_t count = pos < last ? length - offset : last_offset + 1 - offset;
    if (offset < 0 || count < 0 || offset + count > length || done + count > want)
      corrupt(i, fmt::format("{} tokens at offset {} of a sequence of {}", count, offset, length), sample_);
    ds_->read(seq, offset, count, out + done);
    for (int64_t k = done; k < done + count; ++k)
      OCC_CHECK(out[k] < vocab_size_,
                "token id {} in document {} of {} is outside the tokenizer's vocabulary of {}; use the "
                "--tokenizer-model the data was preprocessed with",
                out[k], ds_->document_of(seq), spec_.prefix, vocab_size_);
    done += count;
  }
  if (done != want) corrupt(i, fmt::format("{} tokens instead of {}", done, want), sample_);
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
