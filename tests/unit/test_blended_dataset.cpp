// Blends of datasets: Megatron's --data-path forms and their errors, Megatron's
// blending rule (hand-computed first samples; every dataset's share within one
// sample of weight x n at every n up to 100,000), its per-dataset sample counts
// (the surplus), and a blend's samples being each dataset's own samples, drawn
// as on its own.
#include <gtest/gtest.h>

#include "temp_dir.h"

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "data/blended_dataset.h"
#include "data/indexed_dataset.h"
#include "data/training_data.h"

namespace {

using occ::DataBlend;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const occ::Error& e) {
    return e.what();
  }
  return "";
}

// The blending index as vectors: which dataset, which of its samples.
struct Blend {
  std::vector<int16_t> dataset;
  std::vector<int64_t> sample;
};
Blend blend_of(const std::vector<double>& weights, int64_t n) {
  Blend b{std::vector<int16_t>(size_t(n)), std::vector<int64_t>(size_t(n))};
  occ::build_blending_index(weights, n, b.dataset.data(), b.sample.data());
  return b;
}

TEST(DataBlend, OnePrefixHasWeightOne) {
  DataBlend b = occ::parse_data_blend({"corpus/web"}, "--data-path");
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b.prefixes[0], "corpus/web");
  EXPECT_EQ(b.weights[0], 1.0);
  EXPECT_FALSE(b.weighted);
  EXPECT_EQ(b.describe(), "corpus/web");
  EXPECT_TRUE(occ::parse_data_blend({}, "--data-path").empty());
  // With its weight it is a blend of one to Megatron (a BlendedDataset over it, with the surplus).
  DataBlend one = occ::parse_data_blend({"1.0", "corpus/web"}, "--data-path");
  EXPECT_TRUE(one.weighted);
  EXPECT_EQ(one.describe(), "1 corpus/web");
}

TEST(DataBlend, PairsAreNormalisedAsMegatronDoes) {
  DataBlend b = occ::parse_data_blend({"30", "a", "60", "b", "10", "c"}, "--data-path");
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b.prefixes, (std::vector<std::string>{"a", "b", "c"}));
  // w / numpy.sum(w) in double, as Megatron's normalize.
  EXPECT_EQ(b.weights[0], 30.0 / 100.0);
  EXPECT_EQ(b.weights[1], 60.0 / 100.0);
  EXPECT_EQ(b.weights[2], 10.0 / 100.0);
  EXPECT_EQ(b.describe(), "0.3 a 0.6 b 0.1 c");
  // numpy.sum adds 8 values and more pairwise, not in order: 0.1 x 10 sums to 1 exactly
  // pairwise (the weights come out exactly 0.1), to 0.9999999999999999 in order.
  std::vector<std::string> ten;
  for (int i = 0; i < 10; ++i) ten.insert(ten.end(), {"0.1", "p" + std::to_string(i)});
  for (double w : occ::parse_data_blend(ten, "--data-path").weights) EXPECT_EQ(w, 0.1);
  double in_order = 0;
  for (int i = 0; i < 10; ++i) in_order += 0.1;
  EXPECT_NE(in_order, 1.0);
}

// Megatron's get_blend_from_list: prefixes without weights (an even count with no
// number in a weight's place, or an odd count not starting with one) blend each
// dataset's one epoch by size; a lone prefix is a dataset on its own.
TEST(DataBlend, PrefixesWithoutWeightsAreAnUnweightedBlend) {
  for (const std::vector<std::string>& words : std::vector<std::vector<std::string>>{{"a", "b"}, {"a", "b", "c"},
                                                                                     {"a", "0.5", "c"}}) {
    const occ::DataBlend blend = occ::parse_data_blend(words, "--data-path");
    EXPECT_EQ(blend.prefixes, words);
    EXPECT_FALSE(blend.weighted);
    EXPECT_TRUE(blend.unweighted());
  }
  EXPECT_EQ(occ::parse_data_blend({"a", "b"}, "--data-path").describe(), "a b");
  const occ::DataBlend one = occ::parse_data_blend({"a"}, "--data-path");
  EXPECT_FALSE(one.unweighted());
  EXPECT_FALSE(occ::parse_data_blend({"1", "a"}, "--data-path").unweighted());
}

TEST(DataBlend, BadWeightsAreOneLineErrors) {
  auto err = [](std::vector<std::string> words) { return error_of([&] { occ::parse_data_blend(words, "--data-path"); }); };
  {
    const std::string negative = err({"0.7", "a", "-0.3", "b"});
    EXPECT_NE(negative.find("weight -0.3 of 'b' is negative"), std::string::npos) << negative;
    const std::string zero = err({"0", "a", "1", "b"});
    EXPECT_NE(zero.find("weight 0 for 'a': Megatron's blends take positive weights only"), std::string::npos) << zero;
    const std::string odd = err({"0.5", "a", "0.5"});
    EXPECT_NE(odd.find("weight 0.5 has no prefix after it (3 words, an odd count)"), std::string::npos) << odd;
    const std::string nan = err({"a", "b", "1", "c"});  // weights mixed with prefixes: a typo
    EXPECT_NE(nan.find("'a' (word 1 of 4) is not a weight"), std::string::npos) << nan;
    const std::string inf = err({"inf", "a", "1", "b"});
    EXPECT_NE(inf.find("negative or not finite"), std::string::npos) << inf;
  }
  for (const auto& e : {err({"0.7", "a", "-0.3", "b"}), err({"1", "a", "2"})}) {
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    EXPECT_NE(e.find("--data-path 0.7 A 0.3 B"), std::string::npos) << e;  // the fix
  }
}

TEST(BlendingIndex, FirstSamplesByHand) {
  // weights .5 .3 .2; error_d = w_d * max(i, 1) - count_d, the largest wins (first on ties):
  // i=0: .5 .3 .2 -> 0 | i=1: -.5 .3 .2 -> 1 | i=2: 0 -.4 .4 -> 2 | i=3: .5 -.1 -.4 -> 0
  // i=4: 0 .2 -.2 -> 1 | i=5: .5 -.5 0 -> 0 | i=6: 0 -.2 .2 -> 2 | i=7: .5 .1 -.6 -> 0
  Blend idx = blend_of({0.5, 0.3, 0.2}, 8);
  EXPECT_EQ(idx.dataset, (std::vector<int16_t>{0, 1, 2, 0, 1, 0, 2, 0}));
  EXPECT_EQ(idx.sample, (std::vector<int64_t>{0, 0, 0, 1, 1, 2, 1, 3}));
  // Ties go to the first dataset: equal weights alternate from dataset 0.
  EXPECT_EQ(blend_of({0.5, 0.5}, 4).dataset, (std::vector<int16_t>{0, 1, 0, 1}));
}

// _get_size_per_split_per_dataset: ceil(target x w), and with the surplus
// ceil(ceil(target x w) x 1.005). Normalised by numpy, 0.7 / 0.2 / 0.1 (which sum
// to 0.9999999999999999) become 0.7000000000000001 / 0.20000000000000004 /
// 0.10000000000000002, so a blend of 1,600 samples holds 1120 + 321 + 161 = 1,602.
TEST(BlendingIndex, PartSizesAsMegatron) {
  const std::vector<double> w = occ::normalize_weights({0.7, 0.2, 0.1});
  EXPECT_EQ(w[1], 0.20000000000000004);
  EXPECT_EQ(occ::blend_part_size(1600, w[0]), 1120);
  EXPECT_EQ(occ::blend_part_size(1600, w[1]), 321);
  EXPECT_EQ(occ::blend_part_size(1600, w[2]), 161);
  EXPECT_EQ(occ::blend_part_size(1600, w[0], occ::kBlendSurplus), 1126);
  EXPECT_EQ(occ::blend_part_size(1600, w[1], occ::kBlendSurplus), 323);
  EXPECT_EQ(occ::blend_part_size(1600, w[2], occ::kBlendSurplus), 162);
  EXPECT_EQ(occ::blend_part_size(0, 0.5, occ::kBlendSurplus), 0);
}

TEST(BlendingIndex, SharesStayWithinOneSampleOfTheirWeight) {
  const std::vector<std::vector<double>> blends = {
      {0.7, 0.2, 0.1}, {1.0 / 3, 1.0 / 3, 1.0 / 3}, {0.999, 0.001}, {0.25, 0.75}, {0.05, 0.15, 0.3, 0.5}};
  const int64_t n = 100000;
  for (const auto& w : blends) {
    Blend idx = blend_of(w, n);
    std::vector<int64_t> count(w.size(), 0);
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      const size_t d = idx.dataset[size_t(i)];
      ASSERT_EQ(idx.sample[size_t(i)], count[d]) << "each dataset's samples are taken in order";
      count[d] += 1;
      for (size_t k = 0; k < w.size(); ++k) worst = std::max(worst, std::abs(double(count[k]) - w[k] * double(i + 1)));
    }
    EXPECT_LE(worst, 1.0) << "weights " << w[0] << ", ...: a share strayed " << worst << " samples from weight x n";
    for (size_t k = 0; k < w.size(); ++k) EXPECT_LE(std::abs(double(count[k]) - w[k] * double(n)), 1.0);
  }
}

// Datasets whose tokens name them: dataset k holds tokens k*100000 + d*100 + j.
std::string make_dataset(const occ::test::TempDir& dir, const std::string& name, int k, int docs) {
  const std::string prefix = dir.prefix(name);
  occ::IndexedDatasetWriter w(prefix, 4);
  for (int d = 0; d < docs; ++d) {
    std::vector<int32_t> t;
    for (int j = 0; j < 5 + d % 7; ++j) t.push_back(k * 100000 + d * 100 + j);
    w.add_document(t);
  }
  w.finish();
  return prefix;
}

TEST(BlendedDataset, SamplesAreEachDatasetsOwnInOrder) {
  occ::test::TempDir dir;
  const std::string a = make_dataset(dir, "a", 1, 40), b = make_dataset(dir, "b", 2, 30);
  occ::DataSpec spec;
  spec.train = occ::parse_data_blend({"0.7", a, "0.3", b}, "--train-data-path");
  spec.seq_length = 8;
  spec.seed = 77;
  spec.vocab_size = 300000;
  spec.train_samples = 200;
  spec.cache_path = dir / "cache";
  occ::TrainingData data(spec);
  const auto lines = data.build_missing_indices();
  ASSERT_EQ(lines.size(), 1u);  // one line: the two parts' indices and the blend's, built
  EXPECT_NE(lines[0].find("data index cache: built 3 index sets"), std::string::npos) << lines[0];
  EXPECT_TRUE(data.build_missing_indices().empty());
  data.open();
  const occ::BlendedDataset& blend = data.train();
  ASSERT_EQ(blend.num_parts(), 2u);
  ASSERT_EQ(blend.size(), 200);  // ceil(200 x 0.7) + ceil(200 x 0.3)
  // Each part was asked for its share with Megatron's surplus.
  EXPECT_EQ(blend.part(0).spec().num_samples, 141);
  EXPECT_EQ(blend.part(1).spec().num_samples, 61);
  const int L = 8;
  std::vector<int64_t> next(2, 0);
  std::vector<int32_t> got(L + 1), want(L + 1);
  for (int64_t i = 0; i < blend.size(); ++i) {
    blend.sample(i, got.data());
    const int d = blend.dataset_of(i);
    blend.part(size_t(d)).sample(next[size_t(d)]++, want.data());
    ASSERT_EQ(got, want) << "sample " << i;
    ASSERT_EQ(got[0] / 100000, d + 1) << "sample " << i << " comes from its dataset";
  }
  EXPECT_EQ(next[0], 140);
  EXPECT_EQ(next[1], 60);
}

// uint16 and int32 datasets blend, as in Megatron (their ids widened to int32).
TEST(BlendedDataset, Uint16AndInt32DatasetsBlend) {
  occ::test::TempDir dir;
  const std::string narrow = dir.prefix("narrow"), wide = dir.prefix("wide");
  for (const auto& [prefix, dtype, base] : {std::tuple{narrow, 8, 100}, std::tuple{wide, 4, 70000}}) {
    occ::IndexedDatasetWriter w(prefix, dtype);
    for (int d = 0; d < 20; ++d) w.add_document(std::vector<int32_t>(size_t(10 + d), base + d));
    w.finish();
  }
  occ::DataSpec spec;
  spec.data = occ::parse_data_blend({"0.5", narrow, "0.5", wide}, "--data-path");
  spec.split = "100";
  spec.seq_length = 8;
  spec.seed = 1;
  spec.vocab_size = 80000;
  spec.train_samples = 40;
  spec.cache_path = dir / "cache";
  occ::TrainingData data(spec);
  data.build_missing_indices();
  data.open();
  std::vector<int32_t> s(9);
  bool saw_wide = false, saw_narrow = false;
  for (int64_t i = 0; i < data.train().size(); ++i) {
    data.train().sample(i, s.data());
    (s[0] >= 70000 ? saw_wide : saw_narrow) = true;
  }
  EXPECT_TRUE(saw_wide && saw_narrow);
}

}  // namespace
