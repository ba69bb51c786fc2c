// Megatron .bin/.idx writer and reader: exact bytes, round trips, and a clear
// error for each kind of malformed file.
#include <gtest/gtest.h>

#include "temp_dir.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/indexed_dataset.h"

namespace fs = std::filesystem;

namespace {

using TempDir = occ::test::TempDir;

std::vector<unsigned char> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

template <class T>
void put(std::vector<unsigned char>& b, size_t offset, T v) {
  std::memcpy(b.data() + offset, &v, sizeof(T));
}
template <class T>
void push(std::vector<unsigned char>& b, T v) {
  b.resize(b.size() + sizeof(T));
  put(b, b.size() - sizeof(T), v);
}

void write_dataset(const std::string& prefix, const std::vector<std::vector<int32_t>>& docs, int dtype) {
  occ::IndexedDatasetWriter w(prefix, dtype);
  for (const auto& d : docs) w.add_document(d);
  w.finish();
}

std::vector<int32_t> read_all(const occ::IndexedDataset& ds, int64_t seq) {
  std::vector<int32_t> out(size_t(ds.sequence_length(seq)));
  ds.read(seq, 0, ds.sequence_length(seq), out.data());
  return out;
}

// Expects IndexedDataset::open, or the validation before use, to fail with a
// message containing `word`.
void expect_open_error(const std::string& prefix, const std::string& word) {
  try {
    occ::IndexedDataset::open(prefix).validate();
    ADD_FAILURE() << "open succeeded; expected an error mentioning '" << word << "'";
  } catch (const occ::Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(word), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "multi-line error: " << msg;
  }
}

const std::vector<std::vector<int32_t>> kDocs = {{1, 2, 3}, {}, {65535, 0}, {7}};

}  // namespace

TEST(IndexedDataset, DtypeForVocab) {
  EXPECT_EQ(occ::dtype_for_vocab(50257), 8);
  EXPECT_EQ(occ::dtype_for_vocab(65499), 8);
  EXPECT_EQ(occ::dtype_for_vocab(65500), 4);
  EXPECT_EQ(occ::dtype_for_vocab(250000), 4);
}

// The writer's bytes match the format table built by hand here.
TEST(IndexedDataset, WriterProducesExactMegatronBytes) {
  TempDir dir;
  write_dataset(dir.prefix(), {{5, 6}, {7}}, 8);
  std::vector<unsigned char> idx = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
  push<uint64_t>(idx, 1);
  push<uint8_t>(idx, 8);
  push<uint64_t>(idx, 2);
  push<uint64_t>(idx, 3);
  push<int32_t>(idx, 2);
  push<int32_t>(idx, 1);
  push<int64_t>(idx, 0);
  push<int64_t>(idx, 4);
  for (int64_t d : {0, 1, 2}) push<int64_t>(idx, d);
  EXPECT_EQ(read_bytes(dir.prefix() + ".idx"), idx);
  EXPECT_EQ(read_bytes(dir.prefix() + ".bin"), (std::vector<unsigned char>{5, 0, 6, 0, 7, 0}));
  // No temporaries left behind.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()), 2);
}

// An empty document is written as Megatron's preprocess_data.py writes an empty
// text: a document entry without a sequence (the document index repeats).
TEST(IndexedDataset, EmptyDocumentIsAnEntryWithoutSequence) {
  TempDir dir;
  write_dataset(dir.prefix(), {{5}, {}, {7}}, 8);
  std::vector<unsigned char> idx = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
  push<uint64_t>(idx, 1);
  push<uint8_t>(idx, 8);
  push<uint64_t>(idx, 2);  // sequences
  push<uint64_t>(idx, 4);  // document entries
  push<int32_t>(idx, 1);
  push<int32_t>(idx, 1);
  push<int64_t>(idx, 0);
  push<int64_t>(idx, 2);
  for (int64_t d : {0, 1, 1, 2}) push<int64_t>(idx, d);
  EXPECT_EQ(read_bytes(dir.prefix() + ".idx"), idx);
  auto ds = occ::IndexedDataset::open(dir.prefix());
  EXPECT_EQ(ds.num_documents(), 3);
  EXPECT_EQ(ds.document_of(1), 2) << "sequence 1 is document 2's (document 1 is empty)";
}

TEST(IndexedDataset, RoundTripUint16) {
  TempDir dir;
  write_dataset(dir.prefix(), kDocs, 8);
  auto ds = occ::IndexedDataset::open(dir.prefix());
  ds.validate();
  EXPECT_EQ(ds.dtype_code(), 8);
  ASSERT_EQ(ds.num_sequences(), 3);  // the empty document has none
  EXPECT_EQ(ds.num_documents(), 4);
  EXPECT_EQ(ds.num_tokens(), 6);
  for (int64_t d = 0; d <= 4; ++d) EXPECT_EQ(ds.document_start(d), (std::vector<int64_t>{0, 1, 1, 2, 3})[size_t(d)]);
  const std::vector<std::vector<int32_t>> sequences = {kDocs[0], kDocs[2], kDocs[3]};
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(read_all(ds, i), sequences[size_t(i)]) << "sequence " << i;
  int32_t two[2];
  ds.read(0, 1, 2, two);
  EXPECT_EQ(two[0], 2);
  EXPECT_EQ(two[1], 3);
  EXPECT_THROW(ds.read(0, 2, 2, two), occ::Error);
  EXPECT_THROW(ds.sequence_length(3), occ::Error);
}

TEST(IndexedDataset, RoundTripInt32AndOtherIntegerDtypes) {
  TempDir dir;
  const std::vector<std::vector<int32_t>> big = {{0, 70000, 2147483647}, {12345}};
  write_dataset(dir.prefix("i32"), big, 4);
  auto ds = occ::IndexedDataset::open(dir.prefix("i32"));
  EXPECT_EQ(ds.dtype_code(), 4);
  EXPECT_EQ(read_all(ds, 0), big[0]);
  EXPECT_EQ(read_all(ds, 1), big[1]);
  EXPECT_EQ(fs::file_size(dir.prefix("i32") + ".bin"), 16u);

  const std::vector<std::vector<int32_t>> small = {{0, 1, 100}, {127}};
  for (int code : {1, 2, 3, 5}) {
    std::string p = dir.prefix("d" + std::to_string(code));
    write_dataset(p, small, code);
    auto d = occ::IndexedDataset::open(p);
    EXPECT_EQ(d.dtype_code(), code);
    EXPECT_EQ(read_all(d, 0), small[0]) << "dtype " << code;
    EXPECT_EQ(read_all(d, 1), small[1]) << "dtype " << code;
    EXPECT_EQ(fs::file_size(p + ".bin"), 4u * size_t(occ::dtype_itemsize(code)));
  }
}

TEST(IndexedDataset, MoveKeepsMappingValid) {
  TempDir dir;
  write_dataset(dir.prefix(), kDocs, 8);
  auto a = occ::IndexedDataset::open(dir.prefix());
  occ::IndexedDataset b(std::move(a));
  EXPECT_EQ(read_all(b, 1), kDocs[2]);
  auto c = occ::IndexedDataset::open(dir.prefix());
  c = std::move(b);
  EXPECT_EQ(read_all(c, 0), kDocs[0]);
}

TEST(IndexedDataset, WriterRejectsTokensOutsideDtype) {
  TempDir dir;
  occ::IndexedDatasetWriter w(dir.prefix(), 8);
  try {
    w.add_document({1, 65536});
    FAIL() << "expected a range error";
  } catch (const occ::Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not fit"), std::string::npos) << e.what();
  }
  EXPECT_THROW(w.add_document({-1}), occ::Error);
  EXPECT_THROW(occ::IndexedDatasetWriter(dir.prefix("x"), 6), occ::Error);
}

TEST(IndexedDataset, UnfinishedWriterLeavesNothingUnderFinalName) {
  TempDir dir;
  {
    occ::IndexedDatasetWriter w(dir.prefix(), 8);
    w.add_document({1, 2, 3});
    EXPECT_FALSE(fs::exists(dir.prefix() + ".bin"));
    EXPECT_FALSE(fs::exists(dir.prefix() + ".idx"));
  }
  EXPECT_TRUE(fs::is_empty(dir.path)) << "temporary files left behind";
}

TEST(IndexedDataset, FinishReplacesExistingDataset) {
  TempDir dir;
  write_dataset(dir.prefix(), kDocs, 8);
  write_dataset(dir.prefix(), {{9, 9}}, 8);
  auto ds = occ::IndexedDataset::open(dir.prefix());
  ASSERT_EQ(ds.num_sequences(), 1);
  EXPECT_EQ(read_all(ds, 0), (std::vector<int32_t>{9, 9}));
}

TEST(IndexedDataset, MissingFileNamesDataPath) {
  TempDir dir;
  expect_open_error(dir.prefix("nope"), "No such file");
  expect_open_error(dir.prefix("nope"), "--data-path");
  write_dataset(dir.prefix(), kDocs, 8);
  fs::remove(dir.prefix() + ".bin");
  expect_open_error(dir.prefix(), "ds.bin");
}

// Each corruption of a valid 3-sequence, 4-document uint16 dataset is reported by name.
// idx layout: header 34 bytes, sizes at 34, pointers at 46, doc_idx at 70 (0 1 1 2 3).
class CorruptIndex : public ::testing::Test {
 protected:
  void SetUp() override {
    write_dataset(prefix, kDocs, 8);
    idx = read_bytes(prefix + ".idx");
    ASSERT_EQ(idx.size(), 34u + 12 * 3 + 8 * 5);
  }
  void rewrite() { write_bytes(prefix + ".idx", idx); }
  TempDir dir;
  std::string prefix = dir.prefix();
  std::vector<unsigned char> idx;
};

TEST_F(CorruptIndex, BadMagic) {
  idx[3] = 'X';
  rewrite();
  expect_open_error(prefix, "magic");
}

TEST_F(CorruptIndex, UnsupportedVersion) {
  put<uint64_t>(idx, 9, 2);
  rewrite();
  expect_open_error(prefix, "version 2");
}

TEST_F(CorruptIndex, FloatDtypes) {
  idx[17] = 6;
  rewrite();
  expect_open_error(prefix, "float");
  idx[17] = 7;
  rewrite();
  expect_open_error(prefix, "float");
}

TEST_F(CorruptIndex, UnknownDtype) {
  idx[17] = 99;
  rewrite();
  expect_open_error(prefix, "unknown dtype code 99");
}

TEST_F(CorruptIndex, TruncatedArrays) {
  idx.resize(idx.size() - 8);
  rewrite();
  expect_open_error(prefix, "truncated");
}

TEST_F(CorruptIndex, TruncatedHeader) {
  idx.resize(20);
  rewrite();
  expect_open_error(prefix, "truncated");
}

TEST_F(CorruptIndex, HugeCountsInHeader) {
  put<uint64_t>(idx, 18, ~uint64_t(0) / 4);  // must not overflow into a false "fits"
  rewrite();
  expect_open_error(prefix, "truncated");
}

TEST_F(CorruptIndex, SizeOverrunsBin) {
  put<int32_t>(idx, 34 + 4 * 2, 1000);  // last sequence claims 1000 tokens
  rewrite();
  expect_open_error(prefix, "overruns");
}

TEST_F(CorruptIndex, TruncatedBin) {
  std::vector<unsigned char> bin = read_bytes(prefix + ".bin");
  bin.resize(bin.size() - 2);
  write_bytes(prefix + ".bin", bin);
  expect_open_error(prefix, "overruns");
}

TEST_F(CorruptIndex, InconsistentPointer) {
  put<int64_t>(idx, 46 + 8 * 2, 8);  // should be 10 (3 + 2 tokens of 2 bytes)
  rewrite();
  expect_open_error(prefix, "inconsistent");
}

TEST_F(CorruptIndex, NegativeSize) {
  put<int32_t>(idx, 34 + 4 * 1, -1);
  rewrite();
  expect_open_error(prefix, "negative size");
}

TEST_F(CorruptIndex, DocIdxNotStartingAtZero) {
  put<int64_t>(idx, 70, 1);
  rewrite();
  expect_open_error(prefix, "doc_idx");
}

TEST_F(CorruptIndex, DocIdxNotEndingAtN) {
  put<int64_t>(idx, 70 + 8 * 4, 2);
  rewrite();
  expect_open_error(prefix, "doc_idx");
}

TEST_F(CorruptIndex, DocIdxNotMonotone) {
  put<int64_t>(idx, 70 + 8 * 1, 3);  // 0, 3, 1, 2, 3
  rewrite();
  expect_open_error(prefix, "doc_idx");
}

TEST(IndexedDataset, Int64TokensBeyondInt32AreRejectedOnRead) {
  TempDir dir;
  write_dataset(dir.prefix(), {{1, 2}}, 5);
  std::vector<unsigned char> bin = read_bytes(dir.prefix() + ".bin");
  put<int64_t>(bin, 8, int64_t(1) << 40);
  write_bytes(dir.prefix() + ".bin", bin);
  auto ds = occ::IndexedDataset::open(dir.prefix());
  int32_t out[2];
  ds.read(0, 0, 1, out);
  EXPECT_EQ(out[0], 1);
  try {
    ds.read(0, 0, 2, out);
    FAIL() << "expected an error";
  } catch (const occ::Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not fit int32"), std::string::npos) << e.what();
  }
}

TEST(IndexedDataset, EmptyDatasetOpens) {
  TempDir dir;
  write_dataset(dir.prefix(), {}, 8);
  auto ds = occ::IndexedDataset::open(dir.prefix());
  EXPECT_EQ(ds.num_sequences(), 0);
  EXPECT_EQ(ds.num_documents(), 0);
  EXPECT_EQ(ds.document_start(0), 0);
}
