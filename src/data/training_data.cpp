#include "data/training_data.h"

#include <algorithm>
#include <new>

#include <fmt/format.h>

#include "core/error.h"
#include "core/host_memory.h"
#include "data/tokenizer_stamp.h"

namespace occ {
namespace {

constexpr const char* kBlendKeys[] = {"data_path", "train_data_path", "valid_data_path", "test_data_path"};

std::string flag_of(const std::string& key) {
  std::string flag = "--" + key;
  for (char& c : flag)
    if (c == '_') c = '-';
  return flag;
}

std::string describe_entries(const nlohmann::json& entries) {
  if (entries.size() == 1 && entries[0].value("weight", 0.0) == 1.0) return entries[0].value("prefix", "?");
  std::string s;
  for (const auto& e : entries) s += fmt::format("{}{:g} {}", s.empty() ? "" : " ", e.value("weight", 0.0), e.value("prefix", "?"));
  return s;
}

const char* dtype_vocabulary(int dtype_code) {
  return dtype_code == 8 ? "uint16 token ids: a vocabulary below 65,500" : "int32 token ids: a vocabulary of 65,500 or more";
}

}  // namespace

std::string describe_fingerprint(const nlohmann::json& fp) {
  std::string s;
  for (const char* key : kBlendKeys)
    if (fp.contains(key)) s += fmt::format("{}{} {}", s.empty() ? "" : " ", flag_of(key), describe_entries(fp[key]));
  if (fp.contains("split")) s += fmt::format(" --split {}", fp["split"].get<std::string>());
  if (s.empty())
    s = fmt::format("one dataset of {} documents and {} tokens", fp.value("documents", int64_t(-1)),
                    fp.value("tokens", int64_t(-1)));
  return s;
}

TrainingData::TrainingData(const DataSpec& spec) : spec_(spec) {
  split_mode_ = !spec.data.empty();
  OCC_CHECK(!(split_mode_ && !spec.train.empty()),
            "--data-path and --train-data-path exclude each other (Megatron's rule); give one blend divided by "
            "--split, or the train / valid / test sets apart");
  OCC_CHECK(split_mode_ || !spec.train.empty(),
            "--data-path PREFIX (or --train-data-path PREFIX) is required: a dataset prefix written by 'optimus-cc "
            "preprocess', or weight / prefix pairs");
  OCC_CHECK(!split_mode_ || (spec.valid.empty() && spec.test.empty()),
            "--{}-data-path goes with --train-data-path, not with --data-path (which --split divides); use one form",
            spec.valid.empty() ? "test" : "valid");
  for (const DataBlend* b : {&spec.data, &spec.train, &spec.valid, &spec.test})
    for (const auto& prefix : b->prefixes) open(prefix);
  check_tokenizers();

  if (split_mode_) {
    train_ = build_set(spec.data, 0, spec.train_samples, "train", "--data-path");
    if (spec.eval_samples > 0) {
      valid_ = build_set(spec.data, 1, spec.eval_samples, "validation", "--data-path");
      test_ = build_set(spec.data, 2, spec.eval_samples, "test", "--data-path");
    }
  } else {
    train_ = build_set(spec.train, -1, spec.train_samples, "train", "--train-data-path");
    if (spec.eval_samples > 0 && !spec.valid.empty())
      valid_ = build_set(spec.valid, -1, spec.eval_samples, "validation", "--valid-data-path");
    if (spec.eval_samples > 0 && !spec.test.empty())
      test_ = build_set(spec.test, -1, spec.eval_samples, "test", "--test-data-path");
  }

  int64_t documents = 0, tokens = 0;
  for (const auto& prefix : order_) documents += datasets_.at(prefix)->num_documents(), tokens += datasets_.at(prefix)->num_tokens();
  fingerprint_ = {{"documents", documents}, {"tokens", tokens}};
  if (split_mode_) {
    fingerprint_["data_path"] = blend_json(spec.data);
    fingerprint_["split"] = spec.split;
  } else {
    fingerprint_["train_data_path"] = blend_json(spec.train);
    if (!spec.valid.empty()) fingerprint_["valid_data_path"] = blend_json(spec.valid);
    if (!spec.test.empty()) fingerprint_["test_data_path"] = blend_json(spec.test);
  }
}

const IndexedDataset& TrainingData::open(const std::string& prefix) {
  auto it = datasets_.find(prefix);
  if (it != datasets_.end()) return *it->second;
  auto ds = std::make_unique<IndexedDataset>(IndexedDataset::open(prefix));
  check_token_range(*ds, spec_.vocab_size, prefix);
  order_.push_back(prefix);
  return *datasets_.emplace(prefix, std::move(ds)).first->second;
}

// Token ids of two tokenizers mean different words: every pair of datasets must
// share one (their stamps), or at least the vocabulary's size class (their dtypes).
void TrainingData::check_tokenizers() const {
  std::vector<std::optional<nlohmann::json>> stamps;
  for (const auto& prefix : order_) stamps.push_back(read_tokenizer_stamp(prefix));
  for (size_t a = 0; a < order_.size(); ++a)
    for (size_t b = a + 1; b < order_.size(); ++b) {
      const std::string &A = order_[a], &B = order_[b];
      if (stamps[a] && stamps[b]) {
        const auto &sa = *stamps[a], &sb = *stamps[b];
        OCC_CHECK(sa["fingerprint"] == sb["fingerprint"] && sa["vocab_size"] == sb["vocab_size"],
                  "datasets {} and {} were made with different tokenizers ({}: {}, vocabulary {}; {}: {}, vocabulary "
                  "{}); their token ids mean different words: preprocess every dataset of a run with one tokenizer",
                  A, B, A, sa["tokenizer"].get<std::string>(), sa["vocab_size"].get<int64_t>(), B,
                  sb["tokenizer"].get<std::string>(), sb["vocab_size"].get<int64_t>());
      }
      const int da = datasets_.at(A)->dtype_code(), db = datasets_.at(B)->dtype_code();
      OCC_CHECK(da == db,
                "datasets {} ({}) and {} ({}) come from different vocabularies; preprocess every dataset of a run "
                "with one tokenizer",
                A, dtype_vocabulary(da), B, dtype_vocabulary(db));
    }
}

std::unique_ptr<BlendedDataset> TrainingData::build_set(const DataBlend& blend, int part, int64_t samples,
                                                        const char* name, const char* flag) {
  std::vector<SplitRange> ranges;
  for (const auto& prefix : blend.prefixes) {
    const IndexedDataset& ds = *datasets_.at(prefix);
    ranges.push_back(part < 0 ? SplitRange{0, ds.num_documents()} : split_documents(ds.num_documents(), spec_.split)[size_t(part)]);
  }
  // Training needs every dataset's part (GptDataset says so). A validation or test
  // set without documents is not built (Megatron builds no dataset for such a split:
  // no evaluation on it); a dataset of its blend without documents there is left out
  // of it and the others' weights renormalised. Each is said in one line (notes()).
  const bool is_train = part <= 0 && std::string(name) == "train";
  DataBlend kept = blend;
  if (!is_train) {
    const std::string where = part < 0 ? fmt::format("{} {}", flag, blend.describe()) : fmt::format("--split {}", spec_.split);
    kept = DataBlend{};
    double sum = 0;
    for (size_t d = 0; d < blend.size(); ++d)
      if (ranges[d].size() > 0) sum += blend.weights[d];
    std::vector<SplitRange> nonempty;
    for (size_t d = 0; d < blend.size(); ++d)
      if (ranges[d].size() > 0 && sum > 0) {
        kept.prefixes.push_back(blend.prefixes[d]);
        kept.weights.push_back(blend.weights[d] / sum);
        nonempty.push_back(ranges[d]);
      }
    if (kept.empty()) {
      std::string held;
      for (const auto& prefix : blend.prefixes)
        held += fmt::format("{}{} ({} documents)", held.empty() ? "" : ", ", prefix, datasets_.at(prefix)->num_documents());
      notes_.push_back(fmt::format("{} {}: {} gives it no documents of {}; it is not built (no {} loss)", name,
                                   part < 0 ? "set" : "split", where, held, name));
      return nullptr;
    }
    for (size_t d = 0; d < blend.size(); ++d)
      if (ranges[d].size() == 0)
        notes_.push_back(fmt::format("{} {}: {} gives dataset {} none of its {} documents; it is left out of the {} "
                                     "blend and the other datasets' weights are renormalised",
                                     name, part < 0 ? "set" : "split", where, blend.prefixes[d],
                                     datasets_.at(blend.prefixes[d])->num_documents(), name));
    ranges = nonempty;
  }
  check_index_fits(kept, samples, name);
  try {
    BlendingIndex index = build_blending_index(kept.weights, samples);
    std::vector<std::unique_ptr<GptDataset>> parts;
    for (size_t d = 0; d < ranges.size(); ++d)
      parts.push_back(std::make_unique<GptDataset>(*datasets_.at(kept.prefixes[d]), ranges[d], spec_.seq_length,
                                                   index.counts[d], spec_.seed, name));
    return std::make_unique<BlendedDataset>(std::move(parts), std::move(index));
  } catch (const std::bad_alloc&) {
    fail("the {} set's sample index of {} samples does not fit in this process's memory; lower {}", name, samples,
         is_train ? "--train-iters" : "--eval-iters");
  }
}

// The index's bytes for `samples` samples (GptDataset's arrays: 20 bytes a sample and
// 4 a sequence of the epochs' document order; a blend's index 10 more a sample),
// against this machine's memory, before any of it is allocated.
void TrainingData::check_index_fits(const DataBlend& blend, int64_t samples, const char* name) const {
  int64_t tokens = 0, sequences = 0;
  for (const auto& prefix : blend.prefixes)
    tokens += datasets_.at(prefix)->num_tokens(), sequences += datasets_.at(prefix)->num_sequences();
  const double tokens_per_sequence = std::max(1.0, double(tokens) / double(std::max<int64_t>(sequences, 1)));
  const double per_sample = 20.0 + (blend.size() > 1 ? 10.0 : 0.0) + 4.0 * spec_.seq_length / tokens_per_sequence;
  const double memory = host_memory_bytes();
  if (memory <= 0 || double(samples) * per_sample <= memory) return;
  const bool train = std::string(name) == "train";
  const double gib = double(1 << 30);
  fail("the {} set's sample index of {} samples needs {:.1f} GiB, more than this machine's {:.1f} GiB of memory; the "
       "largest {} it holds here is {}",
       name, samples, double(samples) * per_sample / gib, memory / gib, train ? "--train-iters" : "--eval-iters",
       int64_t(memory / per_sample) / std::max<int64_t>(spec_.global_batch_size, 1));
}

nlohmann::json TrainingData::blend_json(const DataBlend& blend) const {
  nlohmann::json entries = nlohmann::json::array();
  for (size_t d = 0; d < blend.size(); ++d) {
    const IndexedDataset& ds = *datasets_.at(blend.prefixes[d]);
    entries.push_back({{"prefix", blend.prefixes[d]},
                       {"weight", blend.weights[d]},
                       {"documents", ds.num_documents()},
                       {"tokens", ds.num_tokens()}});
  }
  return entries;
}

std::string TrainingData::difference(const nlohmann::json& saved) const {
  if (saved.is_null()) return "";
  const nlohmann::json& mine = fingerprint_;
  const bool one_dataset = split_mode_ && spec_.data.size() == 1;
  auto counts_differ = [](const nlohmann::json& a, const nlohmann::json& b) {
    return a.value("documents", int64_t(-1)) != b.value("documents", int64_t(-2)) ||
           a.value("tokens", int64_t(-1)) != b.value("tokens", int64_t(-2));
  };
  auto dataset_changed = [&](const std::string& prefix, const nlohmann::json& was, const nlohmann::json& now) {
    return fmt::format("trained on a dataset of {} documents and {} tokens, but --data-path {} has {} and {}",
                       was.value("documents", int64_t(-1)), was.value("tokens", int64_t(-1)), prefix,
                       now.value("documents", int64_t(-1)), now.value("tokens", int64_t(-1)));
  };
  // A checkpoint from before blends knows one --data-path by its counts.
  if (!saved.contains("data_path") && !saved.contains("train_data_path")) {
    if (!one_dataset)
      return fmt::format("trained on {}, but this run has {}", describe_fingerprint(saved), describe_fingerprint(mine));
    return counts_differ(saved, mine) ? dataset_changed(spec_.data.prefixes[0], saved, mine) : "";
  }
  // The same flags and weights (a prefix may have moved: its counts identify it)...
  bool same = saved.value("split", std::string()) == mine.value("split", std::string());
  for (const char* key : kBlendKeys) {
    const bool a = saved.contains(key), b = mine.contains(key);
    if (a != b || (a && saved[key].size() != mine[key].size())) same = false;
    if (!same || !a) continue;
    for (size_t d = 0; d < mine[key].size(); ++d)
      if (saved[key][d].value("weight", -1.0) != mine[key][d].value("weight", -2.0)) same = false;
  }
  if (!same)
    return fmt::format("trained on {}, but this run has {}", describe_fingerprint(saved), describe_fingerprint(mine));
  // ... and the same datasets.
  for (const char* key : kBlendKeys) {
    if (!mine.contains(key)) continue;
    for (size_t d = 0; d < mine[key].size(); ++d) {
      const auto &was = saved[key][d], &now = mine[key][d];
      if (!counts_differ(was, now)) continue;
      if (one_dataset) return dataset_changed(now.value("prefix", "?"), was, now);
      return fmt::format("trained on {} whose dataset {} had {} documents and {} tokens, but {} {} has {} and {}",
                         describe_fingerprint(saved), was.value("prefix", "?"), was.value("documents", int64_t(-1)),
                         was.value("tokens", int64_t(-1)), flag_of(key), now.value("prefix", "?"),
                         now.value("documents", int64_t(-1)), now.value("tokens", int64_t(-1)));
    }
  }
  return "";
}

std::string TrainingData::describe() const {
  auto samples = [](const BlendedDataset* set) {
    if (!set) return std::string("none");
    std::string s;
    for (size_t d = 0; d < set->num_parts(); ++d) s += fmt::format("{}{}", d ? " + " : "", set->part(d).tokens_per_epoch());
    return s + " tokens";
  };
  return fmt::format("data: {}; train {}, validation {}, test {}", describe_fingerprint(fingerprint_),
                     samples(train_.get()), samples(valid_.get()), samples(test_.get()));
}

}  // namespace occ
