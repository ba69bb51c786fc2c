#pragma once
// Megatron-LM "mmap" indexed dataset: PREFIX.bin holds the token ids of every
// sequence back to back, PREFIX.idx the header, sizes, byte pointers and
// document index (layout in /work/shared/docs/formats.md). Files written by
// Megatron's tools open here and the other way round.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace occ {

// Megatron dtype codes: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 8 uint16.
// Returns the item size in bytes; throws occ::Error for any other code.
int dtype_itemsize(int dtype_code);
const char* dtype_name(int dtype_code);
// uint16 (8) below 65500 entries, else int32 (4), as Megatron's preprocessing.
int dtype_for_vocab(int64_t vocab_size);

// Streams documents (one sequence each) to temporary files and renames them to
// PREFIX.bin / PREFIX.idx in finish(), so that an interrupted run never leaves
// a half-written dataset under the final name. Destroying an unfinished writer
// removes its temporary files.
class IndexedDatasetWriter {
 public:
  IndexedDatasetWriter(const std::string& prefix, int dtype_code);
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // Throws when a token does not fit the dtype (e.g. >= 65536 for uint16).
  void add_document(const std::vector<int32_t>& tokens);
  void finish();

  int64_t num_documents() const { return int64_t(sizes_.size()); }
  int64_t num_tokens() const { return num_tokens_; }

 private:
  void abandon() noexcept;

  std::string prefix_, bin_tmp_, idx_tmp_;
  int dtype_code_;
  int itemsize_;
  std::FILE* bin_ = nullptr;
  std::vector<int32_t> sizes_;
  int64_t num_tokens_ = 0;
  std::vector<unsigned char> buffer_;  // one document in the on-disk dtype
  bool finished_ = false;
};

// Read-only view of a dataset: both files are mmapped; the index is validated
// once in open() so that read() can trust it.
class IndexedDataset {
 public:
  // Throws a one-line occ::Error naming the file and the defect.
  static IndexedDataset open(const std::string& prefix);

  IndexedDataset(IndexedDataset&& other) noexcept;
  IndexedDataset& operator=(IndexedDataset&& other) noexcept;
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;
  ~IndexedDataset();

  int64_t num_sequences() const { return num_sequences_; }
  int64_t num_documents() const { return int64_t(doc_idx_.size()) - 1; }
  int64_t num_tokens() const { return num_tokens_; }
  int64_t sequence_length(int64_t i) const;
  // Copies tokens [offset, offset + count) of sequence `seq` as int32.
  void read(int64_t seq, int64_t offset, int64_t count, int32_t* out) const;
  // First sequence of each document, plus a final entry = num_sequences().
  const std::vector<int64_t>& doc_idx() const { return doc_idx_; }
  int dtype_code() const { return dtype_code_; }
  const std::string& prefix() const { return prefix_; }

 private:
  struct Mapping {
    const unsigned char* data = nullptr;
    size_t size = 0;
  };
  IndexedDataset() = default;
  static Mapping map_file(const std::string& path);
  static void unmap(Mapping& m) noexcept;
  int64_t pointer(int64_t i) const;

  std::string prefix_;
  Mapping idx_, bin_;
  int dtype_code_ = 0;
  int itemsize_ = 0;
  int64_t num_sequences_ = 0;
  int64_t num_tokens_ = 0;
  const unsigned char* sizes_ = nullptr;     // int32[N] inside idx_, unaligned
  const unsigned char* pointers_ = nullptr;  // int64[N] inside idx_, unaligned
  std::vector<int64_t> doc_idx_;
};

// Every token id must index the embedding: throws, naming `name` (the
// dataset as the user gave it), at the first id outside [0, vocab_size), i.e.
// data preprocessed with another tokenizer.
void check_token_range(const IndexedDataset& ds, int vocab_size, const std::string& name);

}  // namespace occ
