// GPT samples as Megatron's GPTDataset: --split's bookends, the epochs and the
// separate final epoch, samples against the shuffled document stream, token ids
// checked as they are read, and the index cache (hits, stale and corrupt files,
// an unwritable folder). Element-for-element agreement with Megatron's own code:
// test_megatron_goldens.cpp.
#include <gtest/gtest.h>

#include "temp_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/xxhash64.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"

namespace fs = std::filesystem;

namespace {

using TempDir = occ::test::TempDir;

// Document d holds tokens d*1000 + j, j < len(d): every token names its
// document and position, so a sample shows exactly where it was cut from.
int64_t doc_len(int64_t d) { return 3 + (d * 7) % 11; }  // 3..13
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

occ::GptDatasetSpec spec_of(const std::string& prefix, occ::SequenceRange range, int64_t samples, int L, uint32_t seed) {
  return occ::GptDatasetSpec{prefix, range, samples, "train", L, seed};
}

// Builds the part's indices into `cache` (unless there) and opens it.
occ::GptDataset open_part(const occ::IndexedDataset& ds, const occ::GptDatasetSpec& spec, const std::string& cache,
                          int vocab = 1 << 30) {
  occ::CachedArrays entry = occ::gpt_index_cache(spec, cache);
  if (!entry.find()) occ::build_gpt_indices(spec, ds, occ::plan_gpt_part(spec, ds), entry, nullptr);
  auto hit = entry.find();
  EXPECT_TRUE(hit.has_value());
  return occ::GptDataset(ds, spec, std::move(*hit), vocab);
}

// Where a .npy file's data begin (format 1.0: 10 bytes, then the header's length in bytes 8-9).
std::streamoff npy_data_offset(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  unsigned char head[10] = {};
  f.read(reinterpret_cast<char*>(head), 10);
  return std::streamoff(10 + (head[8] | head[9] << 8));
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

TEST(SplitMatrix, MegatronExamples) {
  auto m = occ::split_matrix("949,50,1");
  ASSERT_TRUE(m[0] && m[1] && m[2]);
  EXPECT_EQ(m[0]->first, 0.0);
  EXPECT_EQ(m[0]->second, 949.0 / 1000.0);
  EXPECT_EQ(m[1]->second, 949.0 / 1000.0 + 50.0 / 1000.0);
  EXPECT_EQ(m[2]->second, (949.0 / 1000.0 + 50.0 / 1000.0) + 1.0 / 1000.0);
  m = occ::split_matrix("100");
  EXPECT_TRUE(m[0] && !m[1] && !m[2]) << "splits without weight are none";
  m = occ::split_matrix("98,2,0");
  EXPECT_TRUE(m[0] && m[1] && !m[2]);
  m = occ::split_matrix("0.9/0.1");
  EXPECT_TRUE(m[0] && m[1] && !m[2]);
  // Bookends are rounded half to even, as Python's round: 0.5 x 1 -> 0, x 3 -> 2 (1.5), x 5 -> 2 (2.5).
  const std::pair<double, double> half{0.0, 0.5};
  EXPECT_EQ(occ::split_sequences(half, 1).end, 0);
  EXPECT_EQ(occ::split_sequences(half, 3).end, 2);
  EXPECT_EQ(occ::split_sequences(half, 5).end, 2);
  EXPECT_EQ(occ::split_sequences(half, 7).end, 4);
}

TEST(SplitMatrix, MalformedStringsAreRejected) {
  for (const char* bad : {"", "a,b", "1,,2", "1,2,3,4", "-1,2", "0,0,0", "1e999,1"}) {
    const std::string e = error_of([&] { occ::split_matrix(bad); });
    EXPECT_NE(e.find("--split"), std::string::npos) << bad << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

// _get_num_epochs and the separate final epoch, by hand: 100 tokens an epoch in
// samples of 10 (+1) tokens give (100 - 1) / 10 = 9 samples per epoch.
TEST(GptIndexPlan, EpochsAndTheSeparateFinalEpoch) {
  occ::GptIndexPlan p = occ::plan_gpt_indices(100, 5, 9, 10, "split");
  EXPECT_EQ(p.num_epochs, 1);  // 9 x 10 + 1 = 91 tokens fit one epoch
  EXPECT_EQ(p.num_samples, 9);
  EXPECT_FALSE(p.separate_final_epoch);
  p = occ::plan_gpt_indices(100, 5, 10, 10, "split");  // 101 tokens: 2 epochs; 1 sample of the second < int(0.8 x 9)
  EXPECT_EQ(p.num_epochs, 2);
  EXPECT_EQ(p.num_samples, 19);
  EXPECT_EQ(p.samples_sans_final_epoch, 9);
  EXPECT_TRUE(p.separate_final_epoch);
  p = occ::plan_gpt_indices(100, 5, 16, 10, "split");  // 7 of the second epoch's 9 samples: not below 7
  EXPECT_EQ(p.num_epochs, 2);
  EXPECT_FALSE(p.separate_final_epoch);
  p = occ::plan_gpt_indices(100, 5, -1, 10, "split");  // Megatron's None: one epoch
  EXPECT_EQ(p.num_epochs, 1);
  EXPECT_EQ(p.document_index_size(), 5);
  p = occ::plan_gpt_indices(7, 1, 32, 16, "split");  // a split shorter than one sample: many epochs
  EXPECT_EQ(p.num_epochs, 74);                        // ceil((32 x 16 + 1) / 7)
  EXPECT_EQ(p.num_samples, (74 * 7 - 1) / 16);
  EXPECT_FALSE(p.sample_index_int64());
  EXPECT_FALSE(p.shuffle_index_int64());
  // A split whose sequences hold no tokens would never end Megatron's epoch loop.
  const std::string e = error_of([] { occ::plan_gpt_indices(0, 3, 10, 8, "the valid split of X"); });
  EXPECT_NE(e.find("the valid split of X holds no tokens over 3 documents"), std::string::npos) << e;
  // One token (which Megatron's helper asserts against): samples of it repeated.
  p = occ::plan_gpt_indices(1, 1, 4, 8, "split");
  EXPECT_EQ(p.num_epochs, 33);
  EXPECT_EQ(p.num_samples, 4);
}

// A split of documents without tokens is refused, naming the set and the documents:
// no number of epochs gives a sample (Megatron's epoch loop would never end).
TEST(GptDataset, SplitWithDocumentsButNoTokensIsRefused) {
  TempDir dir;
  const std::string prefix = (dir.path / "hollow").string();
  // Three sequences of 5, 0 and 0 tokens, one per document (zero-length sequences come
  // from other writers; ours and Megatron's write an empty document without one).
  std::string idx("MMIDIDX\0\0", 9);
  auto put = [&idx](auto v) { idx.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(uint64_t(1)), put(uint8_t(8)), put(uint64_t(3)), put(uint64_t(4));
  for (int32_t size : {5, 0, 0}) put(size);
  for (int64_t ptr : {0, 10, 10}) put(ptr);
  for (int64_t d : {0, 1, 2, 3}) put(d);
  std::ofstream(prefix + ".idx", std::ios::binary) << idx;
  std::ofstream(prefix + ".bin", std::ios::binary) << std::string(10, '\1');
  auto ds = occ::IndexedDataset::open(prefix);
  occ::GptDatasetSpec spec = spec_of(prefix, {1, 3}, 10, 4, 1);
  spec.split = "test";
  const std::string msg = error_of([&] { occ::plan_gpt_part(spec, ds); });
  EXPECT_NE(msg.find("test split has no tokens: its documents [1, 3) of " + prefix + " are all empty"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("--split"), std::string::npos) << msg;
}

// Megatron's dtypes: the sample index is int32 until the document index holds more
// than 2^31 - 1 entries (helpers.py: max(len(document_index), sizes.max())), the
// shuffle index uint32 until 2^32 - 2 samples (_build_shuffle_index).
TEST(GptIndexPlan, IndexDtypesSwitchAtMegatronsThresholds) {
  occ::GptIndexPlan p;
  p.num_sequences = 2147483647;
  p.num_epochs = 1;
  EXPECT_FALSE(p.sample_index_int64());
  p.num_sequences = 1073741824;
  p.num_epochs = 2;  // 2^31 entries
  EXPECT_TRUE(p.sample_index_int64());
  p.num_samples = 4294967293;
  EXPECT_FALSE(p.shuffle_index_int64());
  p.num_samples = 4294967294;
  EXPECT_TRUE(p.shuffle_index_int64());
}

// Sample k covers tokens [k L, k L + L] of the stream the document index
// concatenates; sample i of the dataset is sample shuffle[i].
TEST(GptDataset, SamplesTileTheShuffledDocumentStream) {
  TempDir dir;
  auto ds = occ::IndexedDataset::open(make_dataset(dir));
  const int L = 5;
  for (int64_t want : {int64_t(-1), int64_t(60), int64_t(100)}) {
    const occ::GptDatasetSpec spec = spec_of(ds.prefix(), {2, 18}, want, L, 1234);
    occ::GptDataset g = open_part(ds, spec, dir / "cache");
    std::vector<int32_t> stream;
    const occ::NpyArray& doc = g.document_index();
    for (int64_t p = 0; p < doc.elements(); ++p) {
      const int64_t seq = doc.at(p);
      ASSERT_TRUE(seq >= 2 && seq < 18);
      for (int64_t j = 0; j < doc_len(seq); ++j) stream.push_back(int32_t(seq * 1000 + j));
    }
    EXPECT_EQ(int64_t(stream.size()), g.plan().num_epochs * g.plan().tokens_per_epoch);
    EXPECT_EQ(g.size(), (int64_t(stream.size()) - 1) / L);
    if (want >= 0) {
      EXPECT_GE(g.size(), want);
    }
    std::vector<bool> seen(size_t(g.size()), false);
    std::vector<int32_t> s(L + 1);
    for (int64_t i = 0; i < g.size(); ++i) {
      g.sample(i, s.data());
      const int64_t k = g.shuffle_index().at(i);
      ASSERT_FALSE(seen[size_t(k)]) << "the shuffle index is a permutation";
      seen[size_t(k)] = true;
      ASSERT_EQ(s, std::vector<int32_t>(stream.begin() + k * L, stream.begin() + k * L + L + 1)) << "sample " << i;
    }
    // A separate final epoch (or the only one) holds every sequence once.
    if (g.plan().separate_final_epoch || g.plan().num_epochs == 1) {
      std::vector<int64_t> last;
      for (int64_t p = doc.elements() - 16; p < doc.elements(); ++p) last.push_back(doc.at(p));
      std::sort(last.begin(), last.end());
      for (int64_t k = 0; k < 16; ++k) EXPECT_EQ(last[size_t(k)], 2 + k);
    }
  }
}

// The indices are a function of the seed and the data flags: another folder
// builds the same bytes, another seed another order.
TEST(GptDataset, OrderDependsOnlyOnSeedAndFlags) {
  TempDir dir;
  auto ds = occ::IndexedDataset::open(make_dataset(dir));
  auto shuffle = [&](uint32_t seed, const std::string& cache) {
    occ::GptDataset g = open_part(ds, spec_of(ds.prefix(), {0, kDocs}, 50, 4, seed), cache);
    std::vector<int64_t> out;
    for (int64_t i = 0; i < g.size(); ++i) out.push_back(g.shuffle_index().at(i));
    return out;
  };
  EXPECT_EQ(shuffle(9, dir / "one"), shuffle(9, dir / "two"));
  EXPECT_NE(shuffle(9, dir / "one"), shuffle(10, dir / "one"));
}

// No pass over the tokens at start-up: an id outside the vocabulary is refused
// when its sample is read, naming the dataset, the document and the id.
TEST(GptDataset, TokenOutsideTheVocabularyIsRefusedWhenRead) {
  TempDir dir;
  auto ds = occ::IndexedDataset::open(make_dataset(dir));
  occ::GptDataset g = open_part(ds, spec_of(ds.prefix(), {0, kDocs}, -1, 4, 1), dir / "cache", 12000);
  std::vector<int32_t> s(5);
  std::string e;
  for (int64_t i = 0; i < g.size() && e.empty(); ++i) {
    try {
      g.sample(i, s.data());
    } catch (const occ::Error& err) {
      e = err.what();
    }
  }
  EXPECT_NE(e.find("outside the tokenizer's vocabulary of 12000"), std::string::npos) << e;
  EXPECT_NE(e.find("in document 1"), std::string::npos) << e;  // ids 12000.. are documents 12 to 19's
  EXPECT_NE(e.find(ds.prefix()), std::string::npos) << e;
}

// The cache: a hit maps the files; a rebuilt dataset (another .idx) is a miss,
// as is a truncated array or a set without its description, and then is built
// again; an unwritable folder falls back to a temporary one, with a note.
TEST(IndexCache, HitsMissesAndRebuilds) {
  TempDir dir;
  const std::string prefix = make_dataset(dir);
  auto ds = occ::IndexedDataset::open(prefix);
  const occ::GptDatasetSpec spec = spec_of(prefix, {0, kDocs}, 30, 4, 3);
  const std::string cache = dir / "cache";
  occ::CachedArrays entry = occ::gpt_index_cache(spec, cache);
  std::string why;
  EXPECT_FALSE(entry.find(&why));
  EXPECT_NE(why.find("description.json is missing"), std::string::npos) << why;
  occ::build_gpt_indices(spec, ds, occ::plan_gpt_part(spec, ds), entry, nullptr);
  ASSERT_TRUE(entry.find());

  // A truncated array: a miss, naming the file; building again mends it.
  const std::string shuffle = entry.path(cache, "shuffle_index");
  fs::resize_file(shuffle, fs::file_size(shuffle) - 4);
  EXPECT_FALSE(entry.find(&why));
  EXPECT_NE(why.find("shuffle_index.npy holds"), std::string::npos) << why;
  EXPECT_NE(why.find("truncated"), std::string::npos) << why;
  occ::build_gpt_indices(spec, ds, occ::plan_gpt_part(spec, ds), entry, nullptr);
  EXPECT_TRUE(entry.find());

  // A description of other indices (written over ours): a miss.
  const std::string description = cache + "/" + entry.stem() + "-description.json";
  { std::ofstream(description) << "{\"format\": \"optimus-cc data index cache 1\", \"key\": {}, \"arrays\": {}}"; }
  EXPECT_FALSE(entry.find(&why));
  EXPECT_NE(why.find("describes other indices"), std::string::npos) << why;
  occ::build_gpt_indices(spec, ds, occ::plan_gpt_part(spec, ds), entry, nullptr);
  EXPECT_TRUE(entry.find());

  // The dataset written again (another modification time): another key, another set.
  struct timespec times[2] = {{0, UTIME_OMIT}, {1234567, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, (prefix + ".idx").c_str(), times, 0), 0);
  occ::CachedArrays renewed = occ::gpt_index_cache(spec, cache);
  EXPECT_NE(renewed.stem(), entry.stem());
  EXPECT_FALSE(renewed.find());

  // An unwritable folder (a file in the way): the temporary one, said in one line.
  { std::ofstream(dir / "blocked") << "x"; }
  occ::CachedArrays blocked = occ::gpt_index_cache(spec, dir / "blocked/cache");
  std::string note;
  occ::build_gpt_indices(spec, ds, occ::plan_gpt_part(spec, ds), blocked, &note);
  EXPECT_NE(note.find("cannot be written"), std::string::npos) << note;
  EXPECT_NE(note.find(occ::fallback_cache_folder()), std::string::npos) << note;
  EXPECT_EQ(note.find('\n'), std::string::npos);
  auto hit = blocked.find();
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->folder, occ::fallback_cache_folder());
  for (const auto& [name, array] : hit->arrays) fs::remove(array.path());
  fs::remove(occ::fallback_cache_folder() + "/" + blocked.stem() + "-description.json");
}

// Review finding 3: a crash before an array's bytes reached the disk leaves a
// good header over zeros, which dtype and shape alone take for a hit (every
// sample then maps to row 0). The checksum recorded in the description finds
// it; the set is built again and reads right.
TEST(IndexCache, ArrayZeroedBehindAGoodHeaderIsDetectedAndRebuilt) {
  TempDir dir;
  const std::string prefix = make_dataset(dir);
  auto ds = occ::IndexedDataset::open(prefix);
  const occ::GptDatasetSpec spec = spec_of(prefix, {0, kDocs}, 30, 4, 3);
  const std::string cache = dir / "cache";
  std::vector<int32_t> want(5), got(5);
  open_part(ds, spec, cache).sample(7, want.data());
  occ::CachedArrays entry = occ::gpt_index_cache(spec, cache);
  for (const char* array : {"document_index", "sample_index", "shuffle_index"}) {
    ASSERT_TRUE(entry.find());
    const std::string path = entry.path(cache, array);
    const auto size = fs::file_size(path);
    const std::streamoff data = npy_data_offset(path);
    {
      std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(data);  // the header kept
      std::string zeros(size_t(size) - size_t(data), '\0');
      f.write(zeros.data(), std::streamsize(zeros.size()));
    }
    ASSERT_EQ(fs::file_size(path), size);
    std::string why;
    EXPECT_FALSE(entry.find(&why)) << array;
    EXPECT_NE(why.find(std::string(array) + ".npy does not match its checksum"), std::string::npos) << why;
    occ::build_gpt_indices(spec, ds, occ::plan_gpt_part(spec, ds), entry, nullptr);
    open_part(ds, spec, cache).sample(7, got.data());
    EXPECT_EQ(got, want) << array;
  }
}

// The checksum is XXH64 (the reference implementation's test values).
TEST(IndexCache, ChecksumIsXxh64) {
  EXPECT_EQ(occ::xxhash64("", 0), 0xEF46DB3751D8E999ull);
  EXPECT_EQ(occ::xxhash64("a", 1), 0xD24EC4F1A98C6E5Bull);
  EXPECT_EQ(occ::xxhash64("abc", 3), 0x44BC2CF5AD770999ull);
  const std::string spam = "Nobody inspects the spammish repetition";  // 39 bytes: stripes and every tail
  EXPECT_EQ(occ::xxhash64(spam.data(), spam.size()), 0xFBCEA83C8A378BF1ull);
}

// A bad entry met while reading names the array that holds it (the shuffle
// index's out-of-range row was reported as the sample index's).
TEST(GptDataset, DamagedEntryNamesItsArray) {
  TempDir dir;
  const std::string prefix = make_dataset(dir);
  auto ds = occ::IndexedDataset::open(prefix);
  const occ::GptDatasetSpec spec = spec_of(prefix, {0, kDocs}, 30, 4, 3);
  const std::string cache = dir / "cache";
  occ::GptDataset part = open_part(ds, spec, cache);  // mapped: a write to the file shows through
  const std::string shuffle = occ::gpt_index_cache(spec, cache).path(cache, "shuffle_index");
  {
    std::fstream f(shuffle, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(npy_data_offset(shuffle));
    const uint32_t bad = 1u << 30;
    f.write(reinterpret_cast<const char*>(&bad), 4);
  }
  std::vector<int32_t> out(5);
  const std::string e = error_of([&] { part.sample(0, out.data()); });
  EXPECT_NE(e.find("shuffle index entry 1073741824"), std::string::npos) << e;
  EXPECT_NE(e.find("shuffle_index.npy"), std::string::npos) << e;
  EXPECT_EQ(e.find("sample_index.npy"), std::string::npos) << e;
}

// Sizes in messages (the cache's free space) in the unit that shows them: not "0.0 GiB".
TEST(IndexCache, SizesInMessagesHaveTheirUnit) {
  EXPECT_EQ(occ::size_text(0), "0 B");
  EXPECT_EQ(occ::size_text(1023), "1023 B");
  EXPECT_EQ(occ::size_text(1536), "1.50 KiB");
  EXPECT_EQ(occ::size_text(int64_t(23.4 * 1024 * 1024)), "23.4 MiB");
  EXPECT_EQ(occ::size_text(int64_t(700) << 20), "700 MiB");
  EXPECT_EQ(occ::size_text(int64_t(3) << 30), "3.00 GiB");
  EXPECT_EQ(occ::size_text(int64_t(5) << 40), "5.00 TiB");
}

// Megatron's default folder: PREFIX/cache/GPTDataset_indices.
TEST(IndexCache, DefaultFolderIsMegatrons) {
  EXPECT_EQ(occ::default_cache_folder("data/web_text_document"), "data/web_text_document/cache/GPTDataset_indices");
}
