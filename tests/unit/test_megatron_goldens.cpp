// The data indices equal Megatron's, element for element: tests/unit/megatron/
// holds indices made by Megatron-LM's own code (its BlendedMegatronDatasetBuilder,
// GPTDataset, BlendedDataset and helpers.cpp at the commit manifest.json names,
// under NumPy; make_goldens.py made them) on corpora written by Megatron's
// IndexedDatasetBuilder: one dataset over several epochs with and without a
// separate final epoch, splits shorter than one sample, --split 949,50,1 and
// 90,5,5, blends 0.7/0.2/0.1 and 0.5/0.3/0.2 (uint16 and int32 datasets), a
// weighted single dataset and per-set blends; the blending index of several
// weight vectors; every split's sequences for 1 to 700 of them.
#include <gtest/gtest.h>

#include "temp_dir.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/blended_dataset.h"
#include "data/megatron_indices.h"
#include "data/npy_file.h"
#include "data/training_data.h"

namespace {

const std::string kGoldens = std::string(OCC_SOURCE_DIR) + "/tests/unit/megatron";

nlohmann::json manifest() {
  std::ifstream in(kGoldens + "/manifest.json");
  EXPECT_TRUE(in.good()) << "missing " << kGoldens << "/manifest.json";
  return nlohmann::json::parse(in);
}

double from_hex(const std::string& hex) { return std::strtod(hex.c_str(), nullptr); }

// The golden array `name` against ours: dtype, shape, then element by element.
void expect_same(const occ::NpyArray& ours, const std::string& name) {
  SCOPED_TRACE(name);
  const occ::NpyArray golden = occ::NpyArray::open(kGoldens + "/" + name + ".npy");
  ASSERT_EQ(occ::npy_descr(ours.type()), std::string(occ::npy_descr(golden.type())));
  ASSERT_EQ(ours.shape(), golden.shape());
  for (int64_t i = 0; i < golden.elements(); ++i)
    ASSERT_EQ(ours.at(i), golden.at(i)) << "element " << i << " of " << golden.elements();
}

occ::DataBlend blend_of(const nlohmann::json& words, const std::string& flag) {
  std::vector<std::string> w;
  for (const auto& word : words) {
    const std::string s = word.get<std::string>();
    w.push_back(s.rfind("corpus_", 0) == 0 ? kGoldens + "/" + s : s);
  }
  return occ::parse_data_blend(w, flag);
}

}  // namespace

TEST(MegatronGoldens, DocumentSampleShuffleAndBlendingIndices) {
  const nlohmann::json m = manifest();
  ASSERT_FALSE(m["scenarios"].empty());
  for (const auto& [name, scenario] : m["scenarios"].items()) {
    SCOPED_TRACE("scenario " + name);
    const nlohmann::json& flags = scenario["flags"];
    occ::test::TempDir cache;
    occ::DataSpec spec;
    if (flags.contains("data_path")) {
      spec.data = blend_of(flags["data_path"], "--data-path");
      spec.split = flags["split"].get<std::string>();
    } else {
      spec.train = blend_of(flags["train_data_path"], "--train-data-path");
      if (flags.contains("valid_data_path")) spec.valid = blend_of(flags["valid_data_path"], "--valid-data-path");
      if (flags.contains("test_data_path")) spec.test = blend_of(flags["test_data_path"], "--test-data-path");
    }
    spec.seq_length = flags["seq_length"].get<int>();
    spec.seed = flags["seed"].get<uint64_t>();
    spec.vocab_size = m["vocab_size"].get<int>();
    spec.train_samples = scenario["sizes"][0].get<int64_t>();
    spec.valid_samples = scenario["sizes"][1].get<int64_t>();
    spec.test_samples = scenario["sizes"][2].get<int64_t>();
    spec.cache_path = cache.str();
    occ::TrainingData data(spec);
    data.build_missing_indices();
    data.open();
    const occ::BlendedDataset* sets[] = {&data.train(), data.valid(), data.test()};
    const char* names[] = {"train", "valid", "test"};
    for (int k = 0; k < 3; ++k) {
      SCOPED_TRACE(std::string("set ") + names[k]);
      const nlohmann::json& want = scenario["sets"][names[k]];
      ASSERT_EQ(sets[k] != nullptr, !want.is_null());
      if (!sets[k]) continue;
      const occ::BlendedDataset& set = *sets[k];
      ASSERT_EQ(set.size(), want["size"].get<int64_t>());
      ASSERT_EQ(set.num_parts(), want["parts"].size());
      ASSERT_EQ(set.blended(), want.contains("weights"));
      const std::string stem = name + "-" + names[k];
      if (set.blended()) {
        expect_same(set.dataset_index(), stem + "-dataset_index");
        expect_same(set.dataset_sample_index(), stem + "-dataset_sample_index");
      }
      for (size_t d = 0; d < set.num_parts(); ++d) {
        const occ::GptDataset& part = set.part(d);
        const nlohmann::json& p = want["parts"][d];
        EXPECT_EQ(part.spec().range.begin, p["sequences"][0].get<int64_t>());
        EXPECT_EQ(part.spec().range.end, p["sequences"][1].get<int64_t>());
        // null: Megatron's num_samples None (one epoch), ours -1.
        EXPECT_EQ(part.spec().num_samples, p["num_samples"].is_null() ? -1 : p["num_samples"].get<int64_t>());
        EXPECT_EQ(part.size(), p["samples"].get<int64_t>());
        const std::string part_stem = stem + "-" + std::to_string(d);
        expect_same(part.document_index(), part_stem + "-document_index");
        expect_same(part.sample_index(), part_stem + "-sample_index");
        expect_same(part.shuffle_index(), part_stem + "-shuffle_index");
      }
      // The tokens Megatron's __getitem__ gives (tokens, then the last label).
      std::vector<int32_t> sample(size_t(spec.seq_length) + 1);
      for (size_t i = 0; i < want["first_samples"].size(); ++i) {
        set.sample(int64_t(i), sample.data());
        EXPECT_EQ(sample, want["first_samples"][i].get<std::vector<int32_t>>()) << "sample " << i;
      }
    }
  }
}

// helpers.cpp build_blending_indices, fed by BlendedDataset with Megatron's normalize.
TEST(MegatronGoldens, BlendingIndex) {
  const nlohmann::json m = manifest()["blending_index"];
  const occ::NpyArray golden = occ::NpyArray::open(kGoldens + "/blending_index.npy");
  const int64_t n = m["size"].get<int64_t>();
  ASSERT_EQ(golden.shape(), (std::vector<int64_t>{int64_t(m["weights"].size()), n}));
  std::vector<int16_t> dataset(static_cast<size_t>(n));
  std::vector<int64_t> sample(static_cast<size_t>(n));
  for (size_t row = 0; row < m["weights"].size(); ++row) {
    std::vector<double> w;
    for (const auto& hex : m["weights"][row]) w.push_back(from_hex(hex.get<std::string>()));
    occ::build_blending_index(occ::normalize_weights(w), n, dataset.data(), sample.data());
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(dataset[size_t(i)], golden.at(int64_t(row) * n + i)) << "weights row " << row << ", sample " << i;
  }
}

// The builder's bookends: int(round(begin * float(N))), int(round(end * float(N))).
TEST(MegatronGoldens, SplitSequences) {
  const nlohmann::json m = manifest()["split_ranges"];
  const occ::NpyArray golden = occ::NpyArray::open(kGoldens + "/split_ranges.npy");
  const int64_t max_n = m["max_sequences"].get<int64_t>();
  for (size_t s = 0; s < m["splits"].size(); ++s) {
    const std::string split = m["splits"][s].get<std::string>();
    const auto matrix = occ::split_matrix(split);
    for (int64_t n = 1; n <= max_n; ++n)
      for (int k = 0; k < 3; ++k) {
        const int64_t at = ((int64_t(s) * max_n + (n - 1)) * 3 + k) * 2;
        const int64_t begin = golden.at(at), end = golden.at(at + 1);
        ASSERT_EQ(bool(matrix[size_t(k)]), begin >= 0) << "--split " << split << ", split " << k;
        if (!matrix[size_t(k)]) continue;
        const occ::SequenceRange r = occ::split_sequences(*matrix[size_t(k)], n);
        ASSERT_EQ(r.begin, begin) << "--split " << split << " over " << n << " sequences, split " << k;
        ASSERT_EQ(r.end, end) << "--split " << split << " over " << n << " sequences, split " << k;
      }
  }
}
