#pragma once
// Megatron-LM "mmap" indexed dataset: PREFIX.bin holds the token ids of every
// sequence back to back, PREFIX.idx the header, sizes, byte pointers and
// document index (layout in /work/shared/docs/formats.md). Files written by
// Megatron's tools open here and the other way round.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"

namespace occ {

// Megatron dtype codes: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 8 uint16.
// Returns the item size in bytes; throws occ::Error for any other code.
int dtype_itemsize(int dtype_code);
const char* dtype_name(int dtype_code);
// uint16 (8) below 65500 entries, else int32 (4), as Megatron's preprocessing.
int dtype_for_vocab(int64_t vocab_size);

// Streams documents (one sequence each) to temporary files and renames them to
// PREFIX.bin / PREFIX.idx in finish(), so that an interrupted run never leaves
// a half-written dataset under the final name. An empty document is written as
// Megatron's preprocess_data.py writes it: a document entry with no sequence.
// Destroying an unfinished writer removes its temporary files.
class IndexedDatasetWriter {
 public:
  IndexedDatasetWriter(const std::string& prefix, int dtype_code);
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // Throws when a token does not fit the dtype (e.g. >= 65536 for uint16).
  void add_document(const std::vector<int32_t>& tokens);
  void finish();

  int64_t num_documents() const { return int64_t(doc_idx_.size()) - 1; }
  int64_t num_tokens() const { return num_tokens_; }
  // The largest token id written (-1: none), for the tokenizer stamp.
  int64_t max_token_id() const { return max_token_id_; }

 private:
  void abandon() noexcept;

  std::string prefix_, bin_tmp_, idx_tmp_;
  int dtype_code_;
  int itemsize_;
  std::FILE* bin_ = nullptr;
  std::vector<int32_t> sizes_;           // per sequence
  std::vector<int64_t> doc_idx_{0};      // first sequence of each document, then the count
  int64_t num_tokens_ = 0, max_token_id_ = -1;
  std::vector<unsigned char> buffer_;  // one document in the on-disk dtype
  bool finished_ = false;
};

// Read-only view of a dataset: both files are mmapped. open() checks what costs
// nothing whatever the dataset's size (the header, the files' sizes, the ends
// of the document index); validate() walks every entry once (the data index
// cache's builder does, before it reads the sizes). read() checks that what it
// reads lies inside the .bin, so a corrupt .idx is an error, never a bad read.
class IndexedDataset {
 public:
  // Throws a one-line occ::Error naming the file and the defect.
  static IndexedDataset open(const std::string& prefix);
  // Every size, pointer and document entry consistent; throws a one-line occ::Error.
  void validate() const;

  IndexedDataset(IndexedDataset&& other) noexcept;
  IndexedDataset& operator=(IndexedDataset&& other) noexcept;
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;
  ~IndexedDataset();

  int64_t num_sequences() const { return num_sequences_; }
  int64_t num_documents() const { return num_doc_entries_ - 1; }
  // The tokens the sizes add up to (read from the last pointer: exact once validated).
  int64_t num_tokens() const { return num_tokens_; }
  int64_t sequence_length(int64_t i) const {
    OCC_CHECK(i >= 0 && i < num_sequences_, "internal: sequence {} out of range [0, {}) in {}", i, num_sequences_,
              prefix_);
    int32_t n;
    std::memcpy(&n, sizes_ + 4 * i, 4);
    return n;
  }
  // A hint: the index builders read sizes in a shuffled order and ask for them early.
  void prefetch_length(int64_t i) const {
    if (i >= 0 && i < num_sequences_) __builtin_prefetch(sizes_ + 4 * i);
  }
  // Copies tokens [offset, offset + count) of sequence `seq` as int32.
  void read(int64_t seq, int64_t offset, int64_t count, int32_t* out) const;
  // The document index: entry d is the first sequence of document d (0 <= d <=
  // num_documents(); the last entry is num_sequences()).
  int64_t document_start(int64_t d) const;
  // The document holding sequence `seq` (a binary search, for messages).
  int64_t document_of(int64_t seq) const;
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

  std::string prefix_, idx_path_;
  Mapping idx_, bin_;
  int dtype_code_ = 0;
  int itemsize_ = 0;
  int64_t num_sequences_ = 0;
  int64_t num_tokens_ = 0;
  int64_t num_doc_entries_ = 0;
  const unsigned char* sizes_ = nullptr;     // int32[N] inside idx_, unaligned
  const unsigned char* pointers_ = nullptr;  // int64[N] inside idx_, unaligned
  const unsigned char* doc_idx_ = nullptr;   // int64[D] inside idx_, unaligned
};

}  // namespace occ
