// GPT samples: --split parsing, sample contents against the document stream,
// epochs, and seed determinism.
#include <gtest/gtest.h>

#include "temp_dir.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"

namespace fs = std::filesystem;
using occ::SplitRange;

namespace {

using TempDir = occ::test::TempDir;

// Document d holds tokens d*1000 + j, j < len(d): every token names its
// document and position, so a sample shows exactly where it was cut from.
int64_t doc_len(int64_t d) { return 3 + (d * 7) % 11; }  // 3..13, includes short and long documents
constexpr int64_t kDocs = 20;

std::string make_dataset(const TempDir& dir) {
  std::string prefix = (dir.path / "ds").string();
  occ::IndexedDatasetWriter w(prefix, 4);
  for (int64_t d = 0; d < kDocs; ++d) {
    std::vector<int32_t> t;
    for (int64_t j = 0; j < doc_len(d); ++j) t.push_back(int32_t(d * 1000 + j));
    w.add_document(t);
  }
  w.finish();
  return prefix;
}

std::vector<std::vector<int32_t>> all_samples(const occ::GptDataset& g) {
  std::vector<std::vector<int32_t>> out;
  for (int64_t i = 0; i < g.size(); ++i) {
    std::vector<int32_t> s(size_t(g.seq_length()) + 1);
    g.sample(i, s.data());
    out.push_back(s);
  }
  return out;
}

// A token may follow another only inside a document or from a document's last
// token to some document's first.
bool valid_step(int32_t a, int32_t b) {
  if (b == a + 1 && b % 1000 < doc_len(b / 1000)) return true;
  return a % 1000 == doc_len(a / 1000) - 1 && b % 1000 == 0;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const occ::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(SplitDocuments, MegatronExamples) {
  auto s = occ::split_documents(1000, "949,50,1");
  EXPECT_EQ(s[0].begin, 0);
  EXPECT_EQ(s[0].end, 949);
  EXPECT_EQ(s[1].end, 999);
  EXPECT_EQ(s[2].end, 1000);

  s = occ::split_documents(100, "98,2,0");
  EXPECT_EQ(s[0].end, 98);
  EXPECT_EQ(s[1].end, 100);
  EXPECT_EQ(s[2].size(), 0);

  for (const char* all : {"100,0,0", "100", "1"}) {
    s = occ::split_documents(37, all);
    EXPECT_EQ(s[0].end, 37) << all;
    EXPECT_EQ(s[1].size() + s[2].size(), 0) << all;
  }
  // Each third of 10 rounds to 3; the shortfall moves every boundary up by one.
  s = occ::split_documents(10, "1,1,1");
  EXPECT_EQ(s[0].end, 4);
  EXPECT_EQ(s[1].end, 7);
  EXPECT_EQ(s[2].end, 10);
  // Python rounds half to even: 2.5 -> 2.
  s = occ::split_documents(5, "1,1");
  EXPECT_EQ(s[0].end, 3);  // [0,2,4] shifted by the missing 1 -> [0,3,5]
  s = occ::split_documents(10, " 0.9 / 0.1 ");
  EXPECT_EQ(s[0].end, 9);
  EXPECT_EQ(s[1].end, 10);
}

TEST(SplitDocuments, RangesAlwaysTileAllDocuments) {
  for (int64_t n : {0, 1, 2, 3, 7, 100, 12345})
    for (const char* split : {"949,50,1", "0,1,1", "1,0,1", "0,0,1", "3,3,3", "1,2", "0.001,0.001,1000"}) {
      auto s = occ::split_documents(n, split);
      EXPECT_EQ(s[0].begin, 0);
      EXPECT_EQ(s[2].end, n) << n << " " << split;
      for (int k = 0; k < 3; ++k) EXPECT_LE(s[k].begin, s[k].end) << n << " " << split;
      EXPECT_EQ(s[0].end, s[1].begin);
      EXPECT_EQ(s[1].end, s[2].begin);
    }
}

TEST(SplitDocuments, MalformedStringsAreRejected) {
  for (const char* bad : {"", "a,b", "1,,1", "-1,2", "1,2,3,4", "0,0,0", "0", "nan", "1e999", "1;2", "1,2,"}) {
    std::string msg = error_of([&] { occ::split_documents(100, bad); });
    EXPECT_NE(msg.find("--split"), std::string::npos) << "'" << bad << "': " << msg;
  }
  EXPECT_NE(error_of([] { occ::split_documents(10, "0,0"); }).find("zero"), std::string::npos);
}

TEST(PhiloxShuffle, PermutesDeterministicallyAndUniformly) {
  std::vector<int64_t> a(100), b;
  for (int i = 0; i < 100; ++i) a[size_t(i)] = i;
  b = a;
  occ::philox_shuffle(a.data(), 100, 42);
  occ::philox_shuffle(b.data(), 100, 42);
  EXPECT_EQ(a, b);
  EXPECT_EQ(std::set<int64_t>(a.begin(), a.end()).size(), 100u);
  std::vector<int64_t> c(100);
  for (int i = 0; i < 100; ++i) c[size_t(i)] = i;
  occ::philox_shuffle(c.data(), 100, 43);
  EXPECT_NE(a, c);

  // All 6 orders of 3 items appear about equally over 6000 keys.
  std::map<std::vector<int32_t>, int> counts;
  for (uint64_t key = 0; key < 6000; ++key) {
    std::vector<int32_t> p = {0, 1, 2};
    occ::philox_shuffle(p.data(), 3, key);
    ++counts[p];
  }
  ASSERT_EQ(counts.size(), 6u);
  for (auto& [p, n] : counts) EXPECT_NEAR(n, 1000, 150);
}

// One epoch, unique tokens: chaining samples through their shared boundary
// token rebuilds the stream, which must be whole documents of the split, each
// once, in a shuffled order.
TEST(GptDataset, SamplesTileTheShuffledDocumentStream) {
  TempDir dir;
  auto ds = occ::IndexedDataset::open(make_dataset(dir));
  const SplitRange docs{2, 17};
  const int L = 8;
  occ::GptDataset g(ds, docs, L, 0, 1234);
  int64_t tokens = 0;
  for (int64_t d = docs.begin; d < docs.end; ++d) tokens += doc_len(d);
  EXPECT_EQ(g.tokens_per_epoch(), tokens);
  EXPECT_EQ(g.num_epochs(), 1);
  ASSERT_EQ(g.size(), (tokens - 1) / L);

  auto samples = all_samples(g);
  std::map<int32_t, size_t> by_first;
  std::set<int32_t> lasts;
  for (size_t i = 0; i < samples.size(); ++i) {
    by_first[samples[i][0]] = i;
    lasts.insert(samples[i][L]);
  }
  ASSERT_EQ(by_first.size(), samples.size()) << "two samples start at the same token";
  std::vector<int32_t> stream;
  int32_t head = -1;
  for (auto& [first, i] : by_first)
    if (!lasts.count(first)) head = first;
  ASSERT_NE(head, -1);
  for (size_t k = 0; k < samples.size(); ++k) {
    ASSERT_TRUE(by_first.count(head)) << "chain broken after " << k << " samples";
    const auto& s = samples[by_first[head]];
    stream.insert(stream.end(), s.begin() + (k ? 1 : 0), s.end());
    head = s[L];
  }
  ASSERT_EQ(int64_t(stream.size()), g.size() * L + 1);
  for (size_t i = 1; i < stream.size(); ++i) ASSERT_TRUE(valid_step(stream[i - 1], stream[i])) << i;
  EXPECT_EQ(stream[0] % 1000, 0) << "the stream starts at a document start";
  std::vector<int64_t> order;
  for (int32_t t : stream)
    if (t % 1000 == 0) order.push_back(t / 1000);
  std::set<int64_t> seen(order.begin(), order.end());
  EXPECT_EQ(seen.size(), order.size()) << "a document repeats within one epoch";
  for (int64_t d : order) EXPECT_TRUE(d >= docs.begin && d < docs.end) << d;
  int64_t missing = 0;  // only the tail of the stream, under one sample, may be cut off
  for (int64_t d = docs.begin; d < docs.end; ++d)
    if (!seen.count(d)) missing += doc_len(d);
  EXPECT_LT(missing, L);
  EXPECT_FALSE(std::is_sorted(order.begin(), order.end())) << "documents were not shuffled";
}

TEST(GptDataset, ManyEpochsCoverEveryTokenEvenly) {
  TempDir dir;
  auto ds = occ::IndexedDataset::open(make_dataset(dir));
  const SplitRange docs{0, kDocs};
  const int L = 16;
  occ::GptDataset one(ds, docs, L, 0, 7);
  const int64_t want = one.size() * 3 + 5;
  occ::GptDataset g(ds, docs, L, want, 7);
  EXPECT_GE(g.size(), want);
  EXPECT_EQ(g.num_epochs(), 4);
  EXPECT_EQ(g.size(), (g.tokens_per_epoch() * 4 - 1) / L);
  std::map<int32_t, int> count;  // each sample's first L tokens partition the stream
  for (const auto& s : all_samples(g)) {
    for (int i = 0; i < L; ++i) ++count[s[size_t(i)]];
    for (int i = 1; i <= L; ++i) ASSERT_TRUE(valid_step(s[size_t(i - 1)], s[size_t(i)]));
  }
  EXPECT_EQ(int64_t(count.size()), g.tokens_per_epoch()) << "some token never appears";
  for (auto& [t, n] : count) EXPECT_TRUE(n == 3 || n == 4) << "token " << t << " appears " << n << " times";
  // Sample reading must not depend on the order samples are read in.
  std::vector<int32_t> a(L + 1), b(L + 1);
  g.sample(g.size() - 1, a.data());
  g.sample(0, b.data());
  g.sample(g.size() - 1, b.data());
  EXPECT_EQ(a, b);
}

TEST(GptDataset, OrderDependsOnlyOnSeed) {
  TempDir dir;
  auto ds = occ::IndexedDataset::open(make_dataset(dir));
  const SplitRange docs{0, 15};
  occ::GptDataset a(ds, docs, 4, 100, 1234), b(ds, docs, 4, 100, 1234), c(ds, docs, 4, 100, 1235);
  auto sa = all_samples(a), sb = all_samples(b), sc = all_samples(c);
  EXPECT_EQ(sa, sb);
  ASSERT_EQ(sa.size(), sc.size());
  EXPECT_NE(sa, sc);
  EXPECT_GE(sa.size(), 100u);
}

TEST(GptDataset, EmptySplitsAreRejectedClearly) {
  TempDir dir;
  auto ds = occ::IndexedDataset::open(make_dataset(dir));
  std::string msg = error_of([&] { occ::GptDataset(ds, SplitRange{5, 5}, 8, 10, 1, "validation"); });
  EXPECT_NE(msg.find("validation split is empty"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--split"), std::string::npos) << msg;
  // Exactly seq_length + 1 tokens make one sample.
  occ::GptDataset g(ds, SplitRange{0, 1}, 2, 0, 1);
  ASSERT_EQ(g.size(), 1);
  int32_t s[3];
  g.sample(0, s);
  EXPECT_EQ(std::vector<int32_t>(s, s + 3), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_THROW(g.sample(1, s), occ::Error);
}

// Megatron's GPTDataset: a split shorter than one sample repeats its documents
// over as many epochs as the samples need (a tiny test split of --split 949,50,1).
TEST(GptDataset, SplitShorterThanOneSampleRepeatsOverEpochs) {
  TempDir dir;
  auto ds = occ::IndexedDataset::open(make_dataset(dir));
  // Document 0 holds 3 tokens (0, 1, 2); samples of 8 + 1 tokens.
  const int L = 8;
  occ::GptDataset g(ds, SplitRange{0, 1}, L, 10, 1, "test");
  // 10 samples need 10 * 8 + 1 = 81 tokens: 27 epochs of 3.
  EXPECT_EQ(g.num_epochs(), 27);
  EXPECT_EQ(g.tokens_per_epoch(), 3);
  ASSERT_EQ(g.size(), (3 * 27 - 1) / L);
  for (const auto& sample : all_samples(g)) {
    ASSERT_EQ(sample.size(), size_t(L + 1));
    for (size_t i = 1; i < sample.size(); ++i) EXPECT_EQ(sample[i], (sample[i - 1] + 1) % 3) << i;
  }
  // Two documents of 3 + 10 tokens, under one sample of 16 + 1: every epoch holds
  // both, in an order of its own, and the samples tile the epochs' stream.
  occ::GptDataset two(ds, SplitRange{0, 2}, 16, 5, 1, "test");
  EXPECT_EQ(two.num_epochs(), (5 * 16 + 1 + 12) / 13);
  EXPECT_GE(two.size(), 5);
  for (const auto& sample : all_samples(two))
    for (size_t i = 1; i < sample.size(); ++i) ASSERT_TRUE(valid_step(sample[i - 1], sample[i])) << i;
  // No samples asked for: one epoch, which holds none.
  occ::GptDataset none(ds, SplitRange{0, 1}, L, 0, 1, "test");
  EXPECT_EQ(none.num_epochs(), 1);
  EXPECT_EQ(none.size(), 0);
}

// Documents but no tokens: no number of epochs gives a sample (Megatron's epoch
// loop would never end); refused, naming the split and the documents.
TEST(GptDataset, SplitWithDocumentsButNoTokensIsRefused) {
  TempDir dir;
  std::string prefix = (dir.path / "hollow").string();
  {
    occ::IndexedDatasetWriter w(prefix, 8);
    w.add_document({1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
    w.add_document({});
    w.add_document({});
    w.finish();
  }
  auto ds = occ::IndexedDataset::open(prefix);
  const std::string msg = error_of([&] { occ::GptDataset(ds, SplitRange{1, 3}, 4, 10, 1, "test"); });
  EXPECT_NE(msg.find("test split has no tokens"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[1, 3)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--split"), std::string::npos) << msg;
}

TEST(GptDataset, SkipsEmptyDocuments) {
  TempDir dir;
  std::string prefix = (dir.path / "gaps").string();
  {
    occ::IndexedDatasetWriter w(prefix, 8);
    for (int d = 0; d < 6; ++d) w.add_document(d % 2 ? std::vector<int32_t>{} : std::vector<int32_t>{d, d, d});
    w.finish();
  }
  auto ds = occ::IndexedDataset::open(prefix);
  occ::GptDataset g(ds, SplitRange{0, 6}, 2, 0, 3);
  EXPECT_EQ(g.size(), 4);  // 9 tokens -> (9 - 1) / 2
  for (const auto& s : all_samples(g))
    for (int32_t t : s) EXPECT_EQ(t % 2, 0);
}

// Documents of exactly seq_length tokens: sample k is document k of the stream
// plus the first token of document k + 1, so samples reveal which document
// follows which. Identical orders in every epoch would give each document one
// successor only.
TEST(GptDataset, EachEpochHasItsOwnOrder) {
  TempDir dir;
  std::string prefix = (dir.path / "even").string();
  const int L = 4;
  {
    occ::IndexedDatasetWriter w(prefix, 4);
    for (int d = 0; d < 10; ++d) w.add_document({d * 1000, d * 1000 + 1, d * 1000 + 2, d * 1000 + 3});
    w.finish();
  }
  auto ds = occ::IndexedDataset::open(prefix);
  occ::GptDataset g(ds, SplitRange{0, 10}, L, 45, 99);
  ASSERT_EQ(g.num_epochs(), 5);
  std::map<int32_t, std::set<int32_t>> successors;
  std::map<int32_t, int> uses;
  for (const auto& s : all_samples(g)) {
    ASSERT_EQ(s[0] % 1000, 0);
    successors[s[0] / 1000].insert(s[L] / 1000);
    ++uses[s[0] / 1000];
  }
  for (auto& [d, n] : uses) EXPECT_TRUE(n == 5 || n == 4) << "document " << d << " used " << n << " times";
  size_t most = 0;
  for (auto& [d, next] : successors) most = std::max(most, next.size());
  EXPECT_GE(most, 2u) << "every epoch used the same document order";
}
