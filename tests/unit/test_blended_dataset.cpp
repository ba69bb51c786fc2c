// Blends of datasets: Megatron's --data-path forms and their errors, Megatron's
// blending rule (hand-computed first samples; every dataset's share within one
// sample of weight x n at every n up to 100,000), and a blend's samples being each
// dataset's own samples, drawn as on its own.
#include <gtest/gtest.h>

#include "temp_dir.h"

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/blended_dataset.h"
#include "data/indexed_dataset.h"

namespace {

using occ::BlendingIndex;
using occ::DataBlend;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const occ::Error& e) {
    return e.what();
  }
  return "";
}

TEST(DataBlend, OnePrefixHasWeightOne) {
  DataBlend b = occ::parse_data_blend({"corpus/web"}, "--data-path");
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b.prefixes[0], "corpus/web");
  EXPECT_EQ(b.weights[0], 1.0);
  EXPECT_EQ(b.describe(), "corpus/web");
  EXPECT_TRUE(occ::parse_data_blend({}, "--data-path").empty());
}

TEST(DataBlend, PairsAreNormalisedAsMegatronDoes) {
  DataBlend b = occ::parse_data_blend({"30", "a", "60", "b", "10", "c"}, "--data-path");
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b.prefixes, (std::vector<std::string>{"a", "b", "c"}));
  // w / sum in double, as Python's [w / sum(weights) for w in weights].
  EXPECT_EQ(b.weights[0], 30.0 / 100.0);
  EXPECT_EQ(b.weights[1], 60.0 / 100.0);
  EXPECT_EQ(b.weights[2], 10.0 / 100.0);
  EXPECT_EQ(b.describe(), "0.3 a 0.6 b 0.1 c");
  // A zero weight is allowed while the sum is positive.
  EXPECT_EQ(occ::parse_data_blend({"0", "a", "2", "b"}, "--data-path").weights, (std::vector<double>{0.0, 1.0}));
}

TEST(DataBlend, BadWeightsAreOneLineErrors) {
  auto err = [](std::vector<std::string> words) { return error_of([&] { occ::parse_data_blend(words, "--data-path"); }); };
  {
    const std::string negative = err({"0.7", "a", "-0.3", "b"});
    EXPECT_NE(negative.find("weight -0.3 of 'b' is negative"), std::string::npos) << negative;
    const std::string zero = err({"0", "a", "0", "b"});
    EXPECT_NE(zero.find("the weights sum to zero"), std::string::npos) << zero;
    const std::string odd = err({"0.5", "a", "0.5"});
    EXPECT_NE(odd.find("weight 0.5 has no prefix after it (3 words, an odd count)"), std::string::npos) << odd;
    const std::string nan = err({"a", "b"});
    EXPECT_NE(nan.find("'a' (word 1 of 2) is not a weight"), std::string::npos) << nan;
    const std::string inf = err({"inf", "a", "1", "b"});
    EXPECT_NE(inf.find("negative or not finite"), std::string::npos) << inf;
  }
  for (const auto& e : {err({"0.7", "a", "-0.3", "b"}), err({"0", "a", "0", "b"}), err({"1", "a", "2"})}) {
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    EXPECT_NE(e.find("--data-path 0.7 A 0.3 B"), std::string::npos) << e;  // the fix
  }
}

TEST(BlendingIndex, FirstSamplesByHand) {
  // weights .5 .3 .2; error_d = w_d * max(i, 1) - count_d, the largest wins (first on ties):
  // i=0: .5 .3 .2 -> 0 | i=1: -.5 .3 .2 -> 1 | i=2: 0 -.4 .4 -> 2 | i=3: .5 -.1 -.4 -> 0
  // i=4: 0 .2 -.2 -> 1 | i=5: .5 -.5 0 -> 0 | i=6: 0 -.2 .2 -> 2 | i=7: .5 .1 -.6 -> 0
  BlendingIndex idx = occ::build_blending_index({0.5, 0.3, 0.2}, 8);
  EXPECT_EQ(idx.dataset, (std::vector<uint16_t>{0, 1, 2, 0, 1, 0, 2, 0}));
  EXPECT_EQ(idx.sample, (std::vector<int64_t>{0, 0, 0, 1, 1, 2, 1, 3}));
  EXPECT_EQ(idx.counts, (std::vector<int64_t>{4, 2, 2}));
  // Ties go to the first dataset: equal weights alternate from dataset 0.
  EXPECT_EQ(occ::build_blending_index({0.5, 0.5}, 4).dataset, (std::vector<uint16_t>{0, 1, 0, 1}));
}

TEST(BlendingIndex, SharesStayWithinOneSampleOfTheirWeight) {
  const std::vector<std::vector<double>> blends = {
      {0.7, 0.2, 0.1}, {1.0 / 3, 1.0 / 3, 1.0 / 3}, {0.999, 0.001}, {0.25, 0.0, 0.75}, {0.05, 0.15, 0.3, 0.5}};
  const int64_t n = 100000;
  for (const auto& w : blends) {
    BlendingIndex idx = occ::build_blending_index(w, n);
    std::vector<int64_t> count(w.size(), 0);
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      const size_t d = idx.dataset[size_t(i)];
      ASSERT_EQ(idx.sample[size_t(i)], count[d]) << "each dataset's samples are taken in order";
      count[d] += 1;
      for (size_t k = 0; k < w.size(); ++k) worst = std::max(worst, std::abs(double(count[k]) - w[k] * double(i + 1)));
    }
    EXPECT_LE(worst, 1.0) << "weights " << w[0] << ", ...: a share strayed " << worst << " samples from weight x n";
    EXPECT_EQ(count, idx.counts);
    for (size_t k = 0; k < w.size(); ++k) EXPECT_LE(std::abs(double(count[k]) - w[k] * double(n)), 1.0);
    if (w[1] == 0.0) {
      EXPECT_EQ(idx.counts[1], 0) << "a zero weight is never drawn";
    }
  }
}

TEST(BlendingIndex, OneDatasetNeedsNoIndex) {
  BlendingIndex idx = occ::build_blending_index({1.0}, 1000);
  EXPECT_EQ(idx.counts, (std::vector<int64_t>{1000}));
  EXPECT_TRUE(idx.dataset.empty());
}

// Two datasets whose tokens name them: dataset k holds tokens k*100000 + d*100 + j.
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
  auto a = occ::IndexedDataset::open(make_dataset(dir, "a", 1, 40));
  auto b = occ::IndexedDataset::open(make_dataset(dir, "b", 2, 30));
  const int L = 8;
  const int64_t n = 200;
  const uint64_t seed = 77;
  BlendingIndex index = occ::build_blending_index({0.7, 0.3}, n);
  const auto counts = index.counts;
  std::vector<std::unique_ptr<occ::GptDataset>> parts;
  parts.push_back(std::make_unique<occ::GptDataset>(a, occ::SplitRange{0, 40}, L, counts[0], seed));
  parts.push_back(std::make_unique<occ::GptDataset>(b, occ::SplitRange{0, 30}, L, counts[1], seed));
  occ::BlendedDataset blend(std::move(parts), index);
  ASSERT_EQ(blend.size(), n);
  // The same datasets built alone, with the same seed and sample counts.
  occ::GptDataset alone_a(a, occ::SplitRange{0, 40}, L, counts[0], seed), alone_b(b, occ::SplitRange{0, 30}, L, counts[1], seed);
  std::vector<int64_t> next(2, 0);
  std::vector<int32_t> got(L + 1), want(L + 1);
  for (int64_t i = 0; i < n; ++i) {
    blend.sample(i, got.data());
    const int d = blend.dataset_of(i);
    (d == 0 ? alone_a : alone_b).sample(next[size_t(d)]++, want.data());
    ASSERT_EQ(got, want) << "sample " << i;
    ASSERT_EQ(got[0] / 100000, d + 1) << "sample " << i << " comes from its dataset";
  }
  EXPECT_EQ(next[0], counts[0]);
  EXPECT_EQ(next[1], counts[1]);
  EXPECT_EQ(counts[0], 140);
  EXPECT_EQ(counts[1], 60);
}

}  // namespace
