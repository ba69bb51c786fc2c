#include "data/training_data.h"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "core/error.h"
#include "core/timer.h"
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

// An entry's weight: null for the datasets of a blend without weights (their sizes weigh them).
nlohmann::json weight_of(const nlohmann::json& entry) {
  return entry.contains("weight") ? entry["weight"] : nlohmann::json();
}

std::string describe_entries(const nlohmann::json& entries) {
  if (entries.size() == 1 && weight_of(entries[0]) == nlohmann::json(1.0)) return entries[0].value("prefix", "?");
  std::string s;
  for (const auto& e : entries) {
    const nlohmann::json w = weight_of(e);
    if (w.is_number()) s += fmt::format("{}{:g} {}", s.empty() ? "" : " ", w.get<double>(), e.value("prefix", "?"));
    else s += fmt::format("{}{}", s.empty() ? "" : " ", e.value("prefix", "?"));
  }
  return s;
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
  OCC_CHECK(spec.seed <= 0xffffffffu,
            "--seed {} is too large: Megatron's data order draws from NumPy's RandomState, whose seeds are below "
            "2^32; use a seed below 4294967296",
            spec.seed);
  for (const DataBlend* b : {&spec.data, &spec.train, &spec.valid, &spec.test})
    for (const auto& prefix : b->prefixes) open_dataset(prefix);
  check_tokenizers();

  if (split_mode_) {
    train_plan_ = plan_set(spec.data, 0, spec.train_samples, "--data-path");
    if (spec.valid_samples > 0) valid_plan_ = plan_set(spec.data, 1, spec.valid_samples, "--data-path");
    if (spec.test_samples > 0) test_plan_ = plan_set(spec.data, 2, spec.test_samples, "--data-path");
  } else {
    train_plan_ = plan_set(spec.train, 0, spec.train_samples, "--train-data-path");
    if (spec.valid_samples > 0 && !spec.valid.empty())
      valid_plan_ = plan_set(spec.valid, 1, spec.valid_samples, "--valid-data-path");
    if (spec.test_samples > 0 && !spec.test.empty())
      test_plan_ = plan_set(spec.test, 2, spec.test_samples, "--test-data-path");
  }

  int64_t documents = 0, tokens = 0;
  for (const auto& prefix : order_) documents += datasets_.at(prefix)->num_documents(), tokens += datasets_.at(prefix)->num_tokens();
  fingerprint_ = {{"documents", documents}, {"tokens", tokens}, {"data_order", kDataOrder}};
  if (split_mode_) {
    fingerprint_["data_path"] = blend_json(spec.data);
    fingerprint_["split"] = spec.split;
  } else {
    fingerprint_["train_data_path"] = blend_json(spec.train);
    if (!spec.valid.empty()) fingerprint_["valid_data_path"] = blend_json(spec.valid);
    if (!spec.test.empty()) fingerprint_["test_data_path"] = blend_json(spec.test);
  }
}

const IndexedDataset& TrainingData::open_dataset(const std::string& prefix) {
  auto it = datasets_.find(prefix);
  if (it != datasets_.end()) return *it->second;
  auto ds = std::make_unique<IndexedDataset>(IndexedDataset::open(prefix));
  order_.push_back(prefix);
  return *datasets_.emplace(prefix, std::move(ds)).first->second;
}

// Token ids of two tokenizers mean different words: every pair of datasets with
// stamps must share one; a stamp's largest id must fit the vocabulary. (uint16 and
// int32 datasets blend, as in Megatron: their ids are widened to int32.)
void TrainingData::check_tokenizers() const {
  std::vector<std::optional<nlohmann::json>> stamps;
  for (const auto& prefix : order_) stamps.push_back(read_tokenizer_stamp(prefix));
  for (size_t a = 0; a < order_.size(); ++a) {
    if (stamps[a] && stamps[a]->contains("max_token_id") && (*stamps[a])["max_token_id"].is_number_integer()) {
      const int64_t max_id = (*stamps[a])["max_token_id"].get<int64_t>();
      OCC_CHECK(max_id < spec_.vocab_size,
                "dataset {} holds token ids up to {} (recorded by preprocess), outside the tokenizer's vocabulary of "
                "{}; use the --tokenizer-model the data was preprocessed with",
                order_[a], max_id, spec_.vocab_size);
    }
    for (size_t b = a + 1; b < order_.size(); ++b) {
      const std::string &A = order_[a], &B = order_[b];
      if (!stamps[a] || !stamps[b]) continue;
      const auto &sa = *stamps[a], &sb = *stamps[b];
      if (sa["fingerprint"] == sb["fingerprint"] && sa["vocab_size"] == sb["vocab_size"]) continue;
      // What tells the two tokenizers apart: their description, else (one file
      // name, other contents: a tokenizer retrained in place) their vocabulary
      // sizes, else their contents' fingerprints.
      auto which = [&](const nlohmann::json& s, bool by_fingerprint) {
        std::string text = fmt::format("{}, vocabulary {}", s["tokenizer"].get<std::string>(), s["vocab_size"].get<int64_t>());
        return by_fingerprint ? fmt::format("{}, contents {}", text, s["fingerprint"].get<std::string>()) : text;
      };
      const bool same_look = sa["tokenizer"] == sb["tokenizer"] && sa["vocab_size"] == sb["vocab_size"];
      fail("datasets {} and {} were made with different tokenizers ({}: {}; {}: {}){}; their token ids mean different "
           "words: preprocess every dataset of a run with one tokenizer",
           A, B, A, which(sa, same_look), B, which(sb, same_look),
           same_look ? " (files of one name whose contents differ)" : "");
    }
  }
}

std::string TrainingData::cache_folder(const std::string& prefix) const {
  return spec_.cache_path.empty() ? default_cache_folder(prefix) : spec_.cache_path;
}

std::unique_ptr<TrainingData::SetPlan> TrainingData::plan_set(const DataBlend& blend, int k, int64_t samples,
                                                              const char* flag) {
  static const char* const kNames[] = {"train", "validation", "test"};
  static const char* const kSplits[] = {"train", "valid", "test"};
  auto plan = std::make_unique<SetPlan>();
  plan->name = kNames[k];
  plan->split = kSplits[k];
  // Megatron's bookends: --split's in one blend, the whole dataset for a set's own.
  const SplitBookends bookends = split_mode_ ? split_matrix(spec_.split)[size_t(k)] : std::make_pair(0.0, 1.0);
  OCC_CHECK(bookends || k != 0, "--split {} gives training no weight; make its first weight positive", spec_.split);
  std::vector<GptDatasetSpec> parts;
  std::vector<double> weights;
  std::vector<std::string> left_out;
  for (size_t d = 0; d < blend.size() && bookends; ++d) {  // (a split with no weight is none, as Megatron's)
    const IndexedDataset& ds = *datasets_.at(blend.prefixes[d]);
    GptDatasetSpec part{blend.prefixes[d], split_sequences(*bookends, ds.num_sequences()), samples,
                        kSplits[k],        spec_.seq_length,                               uint32_t(spec_.seed)};
    if (part.range.size() == 0) {
      OCC_CHECK(k != 0, "{} has no sequences (--split {} over its {}); training needs every dataset's part: adjust "
                "--split or leave the dataset out",
                part.describe(), spec_.split, ds.num_sequences());
      left_out.push_back(blend.prefixes[d]);
      continue;
    }
    parts.push_back(part);
    weights.push_back(blend.weights[d]);
  }
  // A validation or test set without documents is not built (Megatron's builder would
  // never finish it); a dataset of its blend without documents there is left out of it
  // and the others' weights renormalised. Each is said in one line (notes()).
  const std::string kind = split_mode_ ? "split" : "set";
  const std::string where = split_mode_ ? fmt::format("--split {}", spec_.split) : fmt::format("{} {}", flag, blend.describe());
  if (parts.empty()) {
    std::string held;
    for (const auto& prefix : blend.prefixes)
      held += fmt::format("{}{} ({} documents)", held.empty() ? "" : ", ", prefix, datasets_.at(prefix)->num_documents());
    notes_.push_back(fmt::format("{} {}: {} gives it no documents of {}; it is not built (no {} loss)", plan->name, kind,
                                 where, held, plan->name));
    return nullptr;
  }
  for (const auto& prefix : left_out)
    notes_.push_back(fmt::format("{} {}: {} gives dataset {} none of its {} documents; it is left out of the {} blend and "
                                 "the other datasets' weights are renormalised",
                                 plan->name, kind, where, prefix, datasets_.at(prefix)->num_documents(), plan->name));
  // A dataset on its own (Megatron: one prefix without weights, or a set's own single prefix), or a blend.
  plan->blended = split_mode_ ? blend.weighted || blend.unweighted() : blend.size() > 1;
  plan->blend.split = plan->split;
  if (blend.unweighted()) {
    // Megatron's blend without weights: each dataset's part is one epoch (its
    // num_samples None) and the blend weighs them by their sample counts, known
    // once their indices exist (resolve_unweighted_blend).
    plan->unweighted = true;
    plan->target_samples = samples;
    for (auto& part : parts) part.num_samples = -1;
  } else if (plan->blended) {
    if (weights.size() < blend.size()) weights = normalize_weights(weights);
    plan->blend.weights = normalize_weights(weights);  // BlendedDataset normalises them again
    for (size_t d = 0; d < parts.size(); ++d) {
      parts[d].num_samples = blend_part_size(samples, weights[d], kBlendSurplus);
      plan->blend.size += blend_part_size(samples, weights[d]);
    }
  }
  plan->parts = parts;
  for (const auto& part : parts) {
    plan->part_caches.push_back(gpt_index_cache(part, cache_folder(part.prefix)));
    plan->blend.parts.push_back(plan->part_caches.back().key());
  }
  if (plan->blended && !plan->unweighted)
    plan->blend_cache.push_back(blend_index_cache(plan->blend, cache_folder(parts.front().prefix)));
  return plan;
}

void TrainingData::resolve_unweighted_blend(SetPlan& plan, const std::vector<int64_t>& part_samples) const {
  if (!plan.unweighted || !plan.blend_cache.empty()) return;
  int64_t total = 0;
  std::vector<double> sizes;
  for (int64_t n : part_samples) total += n, sizes.push_back(double(n));
  std::string each;
  for (size_t d = 0; d < part_samples.size(); ++d)
    each += fmt::format("{}{} {}", d ? ", " : "", plan.parts[d].prefix, part_samples[d]);
  // Megatron builds the blend min(asked, one epoch of each) long and its run fails
  // when the samples run out; here the run is refused before it starts.
  const char* fewer = plan.split == "train"   ? "fewer iterations (--train-iters or --train-samples)"
                      : plan.split == "valid" ? "fewer --eval-iters (or a longer --eval-interval)"
                                              : "fewer --eval-iters";
  OCC_CHECK(total >= plan.target_samples,
            "the {} set of a blend without weights is one epoch of each dataset ({} samples: {}), fewer than the {} "
            "it needs; give weights to repeat the datasets (--data-path 0.5 A 0.5 B), or {}",
            plan.name, total, each, plan.target_samples, fewer);
  plan.blend.weights = normalize_weights(sizes);
  plan.blend.size = plan.target_samples;  // Megatron's min(asked, their sum), the sum being no smaller here
  plan.blend_cache.push_back(blend_index_cache(plan.blend, cache_folder(plan.parts.front().prefix)));
}

void TrainingData::check_room(const std::string& set, int64_t bytes, int64_t samples, const std::string& folder) const {
  const int64_t free = free_bytes(folder);
  if (free < 0 || bytes <= free) return;
  // The largest value of the flag the count comes from whose indices would fit.
  const double fit = double(samples) * double(free) / double(bytes);
  const int64_t batch = std::max<int64_t>(spec_.global_batch_size, 1);
  std::string largest;
  if (set == "train")
    largest = spec_.train_in_samples ? fmt::format("--train-samples it holds here is {}", int64_t(fit))
                                     : fmt::format("--train-iters it holds here is {}", int64_t(fit) / batch);
  else
    largest = fmt::format("--eval-iters it holds here is {}",
                          int64_t(double(spec_.eval_iters) * fit / double(std::max<int64_t>(samples, 1))));
  fail("the {} set's sample index of {} samples needs {} in {}, more than the {} free there; the largest "
       "{} (or pass --data-cache-path on a larger disk)",
       set, samples, size_text(bytes), folder, size_text(free), largest);
}

// A line when a set is built again because its files are damaged or stale
// (not when it was never built: its description missing).
static std::string rebuild_note(const std::string& what, const std::string& why) {
  if (why.empty() || why.ends_with("is missing")) return "";
  return fmt::format("note: building the data indices of {} again: {}", what, why);
}

std::vector<std::string> TrainingData::build_missing_indices() {
  const double start = now_seconds();
  int built = 0;
  std::vector<std::string> folders;
  std::vector<std::string> lines;
  auto note = [&lines](const std::string& line) {
    if (!line.empty() && std::find(lines.begin(), lines.end(), line) == lines.end()) lines.push_back(line);
  };
  for (SetPlan* plan : {train_plan_.get(), valid_plan_.get(), test_plan_.get()}) {
    if (!plan) continue;
    std::vector<int64_t> sizes;
    for (size_t d = 0; d < plan->parts.size(); ++d) {
      std::string why;
      auto hit = plan->part_caches[d].find(&why);
      if (!hit) {
        note(rebuild_note(plan->parts[d].describe(), why));
        const GptDatasetSpec& part = plan->parts[d];
        const IndexedDataset& ds = *datasets_.at(part.prefix);
        const GptIndexPlan indices = plan_gpt_part(part, ds);
        std::string line;
        check_room(plan->name, gpt_index_bytes(indices), indices.num_samples, plan->part_caches[d].build_folder(&line));
        note(line);
        build_gpt_indices(part, ds, indices, plan->part_caches[d], &line);
        note(line);
        ++built;
        hit = plan->part_caches[d].find();
        OCC_CHECK(hit.has_value(), "internal: the indices of {} were built but are not found", part.describe());
      }
      sizes.push_back(hit->result.value("num_samples", int64_t(0)));
      if (std::find(folders.begin(), folders.end(), hit->folder) == folders.end()) folders.push_back(hit->folder);
    }
    resolve_unweighted_blend(*plan, sizes);
    std::string why;
    if (plan->blended && !plan->blend_cache[0].find(&why)) {
      note(rebuild_note(fmt::format("the {} blend", plan->name), why));
      std::string line;
      check_room(plan->name, 10 * plan->blend.size + 256, plan->blend.size, plan->blend_cache[0].build_folder(&line));
      note(line);
      build_blend_index(plan->blend, sizes, plan->blend_cache[0], &line);
      ++built;
    }
  }
  if (built > 0) {
    std::string where;
    for (const auto& f : folders) where += (where.empty() ? "" : ", ") + f;
    lines.push_back(fmt::format("data index cache: built {} index set{} in {:.2f} s into {}", built, built == 1 ? "" : "s",
                                now_seconds() - start, where));
  }
  return lines;
}

std::unique_ptr<BlendedDataset> TrainingData::open_set(SetPlan& plan) {
  auto missing = [](const std::string& what, const std::string& why) {
    fail("the data indices of {} are not in the cache ({}); they are built at start-up by rank 0 (and the first "
         "rank of each node): was the cache folder changed while the job started?",
         what, why);
  };
  // The checksums were verified by this node's builder (build_missing_indices), which
  // found or built every set just before: a pass over the indices on every rank is spared.
  constexpr bool kVerifyChecksums = false;
  std::vector<std::unique_ptr<GptDataset>> parts;
  for (size_t d = 0; d < plan.parts.size(); ++d) {
    std::string why;
    auto hit = plan.part_caches[d].find(&why, kVerifyChecksums);
    if (!hit) missing(plan.parts[d].describe(), why);
    parts.push_back(std::make_unique<GptDataset>(*datasets_.at(plan.parts[d].prefix), plan.parts[d], std::move(*hit),
                                                 spec_.vocab_size));
  }
  std::optional<CachedArrays::Hit> index;
  if (plan.unweighted) {
    std::vector<int64_t> sizes;
    for (const auto& part : parts) sizes.push_back(part->size());
    resolve_unweighted_blend(plan, sizes);
  }
  if (plan.blended) {
    std::string why;
    index = plan.blend_cache[0].find(&why, kVerifyChecksums);
    if (!index) missing(fmt::format("the {} blend", plan.name), why);
  }
  return std::make_unique<BlendedDataset>(std::move(parts), std::move(index));
}

void TrainingData::open() {
  train_ = open_set(*train_plan_);
  if (valid_plan_) valid_ = open_set(*valid_plan_);
  if (test_plan_) test_ = open_set(*test_plan_);
}

nlohmann::json TrainingData::blend_json(const DataBlend& blend) const {
  nlohmann::json entries = nlohmann::json::array();
  for (size_t d = 0; d < blend.size(); ++d) {
    const IndexedDataset& ds = *datasets_.at(blend.prefixes[d]);
    entries.push_back({{"prefix", blend.prefixes[d]},
                       {"weight", blend.unweighted() ? nlohmann::json() : nlohmann::json(blend.weights[d])},
                       {"documents", ds.num_documents()},
                       {"tokens", ds.num_tokens()}});
  }
  return entries;
}

std::string TrainingData::order_difference(const nlohmann::json& saved) const {
  const int order = saved.is_object() ? saved.value("data_order", 1) : 1;
  if (order == kDataOrder) return "";
  return fmt::format("trained in optimus-cc's sample order {} ({}), but this build reads Megatron-core's GPTDataset "
                     "order (data order {}): resuming would continue on another stream of samples, some already seen "
                     "and others never",
                     order, order == 1 ? "per-epoch Philox shuffles" : "unknown", kDataOrder);
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
      if (weight_of(saved[key][d]) != weight_of(mine[key][d])) same = false;
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
    for (size_t d = 0; d < set->num_parts(); ++d)
      s += fmt::format("{}{}", d ? " + " : "", set->part(d).plan().tokens_per_epoch);
    return s + fmt::format(" tokens, {} samples", set->size());
  };
  return fmt::format("data: {}; train {}, validation {}, test {}", describe_fingerprint(fingerprint_),
                     samples(train_.get()), samples(valid_.get()), samples(test_.get()));
}

}  // namespace occ
