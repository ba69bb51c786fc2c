#include "data/indexed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>

#include "core/error.h"
#include "data/tokenizer_stamp.h"

// The on-disk format is little-endian; values are copied with memcpy.
static_assert(std::endian::native == std::endian::little, "indexed datasets assume a little-endian host");

namespace occ {
namespace {

constexpr unsigned char kIndexMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
constexpr size_t kHeaderBytes = 34;  // magic 9 + version 8 + dtype 1 + N 8 + D 8

template <class T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <class T>
void append(std::vector<unsigned char>& out, T v) {
  const auto* p = reinterpret_cast<const unsigned char*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

// Inclusive range of token ids a dtype can store (ids are never negative).
int64_t dtype_max(int code) {
  switch (code) {
    case 1: return 255;
    case 2: return 127;
    case 3: return 32767;
    case 8: return 65535;
    default: return std::numeric_limits<int32_t>::max();  // int32, int64 (read back as int32)
  }
}

template <class T>
void convert(const unsigned char* src, int64_t count, int32_t* out) {
  for (int64_t i = 0; i < count; ++i) out[i] = int32_t(load<T>(src + i * int64_t(sizeof(T))));
}

}  // namespace

int dtype_itemsize(int code) {
  switch (code) {
    case 1: case 2: return 1;
    case 3: case 8: return 2;
    case 4: return 4;
    case 5: return 8;
    case 6: case 7:
      // Megatron versions disagree on which of 6/7 is float32 vs float64; both are floats.
      fail("dtype code {} is a float type, which cannot hold token ids; use an integer dtype (1,2,3,4,5,8)", code);
    default:
      fail("unknown dtype code {}; supported codes are 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 8 uint16", code);
  }
}

const char* dtype_name(int code) {
  switch (code) {
    case 1: return "uint8";
    case 2: return "int8";
    case 3: return "int16";
    case 4: return "int32";
    case 5: return "int64";
    case 8: return "uint16";
    default: return "unknown";
  }
}

int dtype_for_vocab(int64_t vocab_size) { return vocab_size < 65500 ? 8 : 4; }

// ---- writer -------------------------------------------------------------------------------

IndexedDatasetWriter::IndexedDatasetWriter(const std::string& prefix, int dtype_code)
    : prefix_(prefix), dtype_code_(dtype_code), itemsize_(dtype_itemsize(dtype_code)) {
  OCC_CHECK(!prefix.empty(), "empty output prefix; pass --output-prefix PATH/NAME");
  std::filesystem::path parent = std::filesystem::path(prefix).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  // The pid keeps two concurrent runs on the same prefix from sharing temporaries.
  std::string suffix = ".tmp-" + std::to_string(::getpid());
  bin_tmp_ = prefix + ".bin" + suffix;
  idx_tmp_ = prefix + ".idx" + suffix;
  bin_ = std::fopen(bin_tmp_.c_str(), "wb");
  OCC_CHECK(bin_, "cannot create {}: {}; check that --output-prefix names a writable directory", bin_tmp_,
            std::strerror(errno));
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (!finished_) abandon();
}

void IndexedDatasetWriter::abandon() noexcept {
  if (bin_) std::fclose(bin_);
  bin_ = nullptr;
  std::remove(bin_tmp_.c_str());
  std::remove(idx_tmp_.c_str());
}

void IndexedDatasetWriter::add_document(const std::vector<int32_t>& tokens) {
  OCC_CHECK(!finished_, "internal: add_document after finish on {}", prefix_);
  OCC_CHECK(tokens.size() <= size_t(std::numeric_limits<int32_t>::max()),
            "document {} has {} tokens, more than the format's int32 size field holds; split the document",
            num_documents(), tokens.size());
  if (tokens.empty()) {  // Megatron's preprocess: a document entry without a sequence
    doc_idx_.push_back(int64_t(sizes_.size()));
    return;
  }
  const int64_t max = dtype_max(dtype_code_);
  buffer_.resize(tokens.size() * size_t(itemsize_));
  unsigned char* p = buffer_.data();
  for (int32_t t : tokens) {
    OCC_CHECK(t >= 0 && t <= max, "token id {} in document {} does not fit dtype {} (0..{}); use a wider dtype",
              t, num_documents(), dtype_name(dtype_code_), max);
    max_token_id_ = std::max<int64_t>(max_token_id_, t);
    switch (itemsize_) {
      case 1: { uint8_t v = uint8_t(t); std::memcpy(p, &v, 1); break; }
      case 2: { uint16_t v = uint16_t(t); std::memcpy(p, &v, 2); break; }
      case 4: std::memcpy(p, &t, 4); break;
      default: { int64_t v = t; std::memcpy(p, &v, 8); break; }
    }
    p += itemsize_;
  }
  if (std::fwrite(buffer_.data(), 1, buffer_.size(), bin_) != buffer_.size())
    fail("cannot write {}: {}; check free disk space", bin_tmp_, std::strerror(errno));
  sizes_.push_back(int32_t(tokens.size()));
  doc_idx_.push_back(int64_t(sizes_.size()));
  num_tokens_ += int64_t(tokens.size());
}

void IndexedDatasetWriter::finish() {
  OCC_CHECK(!finished_, "internal: finish called twice on {}", prefix_);
  int flush_error = std::fflush(bin_) != 0 || std::ferror(bin_);
  int close_error = std::fclose(bin_) != 0;
  bin_ = nullptr;
  OCC_CHECK(!flush_error && !close_error, "cannot write {}: {}; check free disk space", bin_tmp_, std::strerror(errno));

  const uint64_t n = sizes_.size();
  std::vector<unsigned char> idx;
  idx.reserve(kHeaderBytes + 12 * n + 8 * doc_idx_.size());
  idx.insert(idx.end(), kIndexMagic, kIndexMagic + sizeof(kIndexMagic));
  append<uint64_t>(idx, 1);
  append<uint8_t>(idx, uint8_t(dtype_code_));
  append<uint64_t>(idx, n);
  append<uint64_t>(idx, uint64_t(doc_idx_.size()));
  for (int32_t s : sizes_) append<int32_t>(idx, s);
  int64_t ptr = 0;
  for (int32_t s : sizes_) {
    append<int64_t>(idx, ptr);
    ptr += int64_t(s) * itemsize_;
  }
  for (int64_t d : doc_idx_) append<int64_t>(idx, d);  // one sequence per non-empty document

  std::FILE* f = std::fopen(idx_tmp_.c_str(), "wb");
  OCC_CHECK(f, "cannot create {}: {}; check that --output-prefix names a writable directory", idx_tmp_,
            std::strerror(errno));
  bool ok = std::fwrite(idx.data(), 1, idx.size(), f) == idx.size();
  ok = (std::fclose(f) == 0) && ok;
  OCC_CHECK(ok, "cannot write {}: {}; check free disk space", idx_tmp_, std::strerror(errno));

  // Remove the old index first: a crash between the renames then leaves no
  // .idx at all (a clear error on open) rather than an old .idx over a new .bin.
  const std::string bin = prefix_ + ".bin", idx_path = prefix_ + ".idx";
  if (std::remove(idx_path.c_str()) != 0 && errno != ENOENT)
    fail("cannot replace {}: {}; check permissions", idx_path, std::strerror(errno));
  OCC_CHECK(std::rename(bin_tmp_.c_str(), bin.c_str()) == 0, "cannot rename {} to {}: {}", bin_tmp_, bin,
            std::strerror(errno));
  OCC_CHECK(std::rename(idx_tmp_.c_str(), idx_path.c_str()) == 0, "cannot rename {} to {}: {}", idx_tmp_,
            idx_path, std::strerror(errno));
  finished_ = true;
}

// ---- reader -------------------------------------------------------------------------------

IndexedDataset::Mapping IndexedDataset::map_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  OCC_CHECK(fd >= 0, "cannot open {}: {}; check --data-path (a prefix without .bin/.idx)", path,
            std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    fail("cannot stat {}: {}", path, std::strerror(err));
  }
  Mapping m;
  m.size = size_t(st.st_size);
  if (m.size > 0) {  // mmap of length 0 is an error; an empty .bin is legal
    void* p = ::mmap(nullptr, m.size, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    ::close(fd);
    OCC_CHECK(p != MAP_FAILED, "cannot mmap {}: {}", path, std::strerror(err));
    m.data = static_cast<const unsigned char*>(p);
  } else {
    ::close(fd);
  }
  return m;
}

void IndexedDataset::unmap(Mapping& m) noexcept {
  if (m.data) ::munmap(const_cast<unsigned char*>(m.data), m.size);
  m = Mapping{};
}

IndexedDataset::~IndexedDataset() {
  unmap(idx_);
  unmap(bin_);
}

IndexedDataset::IndexedDataset(IndexedDataset&& o) noexcept { *this = std::move(o); }

IndexedDataset& IndexedDataset::operator=(IndexedDataset&& o) noexcept {
  if (this == &o) return *this;
  unmap(idx_);
  unmap(bin_);
  prefix_ = std::move(o.prefix_);
  idx_path_ = std::move(o.idx_path_);
  idx_ = std::exchange(o.idx_, Mapping{});
  bin_ = std::exchange(o.bin_, Mapping{});
  dtype_code_ = o.dtype_code_;
  itemsize_ = o.itemsize_;
  num_sequences_ = std::exchange(o.num_sequences_, 0);
  num_tokens_ = std::exchange(o.num_tokens_, 0);
  num_doc_entries_ = std::exchange(o.num_doc_entries_, 0);
  sizes_ = std::exchange(o.sizes_, nullptr);
  pointers_ = std::exchange(o.pointers_, nullptr);
  doc_idx_ = std::exchange(o.doc_idx_, nullptr);
  return *this;
}

IndexedDataset IndexedDataset::open(const std::string& prefix) {
  IndexedDataset ds;
  ds.prefix_ = prefix;
  const std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  ds.idx_path_ = idx_path;
  // What fixes a damaged dataset: the command that makes it again (its stamp names the tokenizer).
  const std::string kRegenerate = regenerate_command(prefix);
  ds.idx_ = map_file(idx_path);
  const unsigned char* h = ds.idx_.data;
  const size_t size = ds.idx_.size;

  OCC_CHECK(size >= kHeaderBytes, "{} is truncated: {} bytes, shorter than the {}-byte header; {}", idx_path, size,
            kHeaderBytes, kRegenerate);
  OCC_CHECK(std::memcmp(h, kIndexMagic, sizeof(kIndexMagic)) == 0,
            "{} has a bad magic (not MMIDIDX): it is not a Megatron mmap indexed dataset, or its header is damaged; "
            "check --data-path, or {}",
            idx_path, kRegenerate);
  const uint64_t version = load<uint64_t>(h + 9);
  OCC_CHECK(version == 1, "{} has unsupported version {} (only version 1 is supported); {}", idx_path, version,
            kRegenerate);
  const int code = load<uint8_t>(h + 17);
  try {
    ds.itemsize_ = dtype_itemsize(code);
  } catch (const Error& e) {
    fail("{}: {}", idx_path, e.what());
  }
  ds.dtype_code_ = code;
  const uint64_t n = load<uint64_t>(h + 18), d = load<uint64_t>(h + 26);
  // Compare counts before multiplying so that a corrupt header cannot overflow.
  const uint64_t room = size - kHeaderBytes;
  OCC_CHECK(n <= room / 12 && d <= (room - 12 * n) / 8,
            "{} is truncated: its header promises {} sequences and {} document entries but the file has only {} "
            "bytes; {}",
            idx_path, n, d, size, kRegenerate);
  OCC_CHECK(d >= 1, "{} has an empty document index (0 entries; at least [0] is required); {}", idx_path,
            kRegenerate);
  ds.num_sequences_ = int64_t(n);
  ds.num_doc_entries_ = int64_t(d);
  ds.sizes_ = h + kHeaderBytes;
  ds.pointers_ = ds.sizes_ + 4 * n;
  ds.doc_idx_ = ds.pointers_ + 8 * n;
  ds.bin_ = map_file(bin_path);

  OCC_CHECK(ds.document_start(0) == 0, "{} has a bad doc_idx: it starts at {} instead of 0; {}", idx_path,
            ds.document_start(0), kRegenerate);
  OCC_CHECK(ds.document_start(int64_t(d) - 1) == ds.num_sequences_,
            "{} has a bad doc_idx: it ends at {} instead of {} sequences; {}", idx_path,
            ds.document_start(int64_t(d) - 1), ds.num_sequences_, kRegenerate);
  if (n > 0) {
    const int64_t last = int64_t(n) - 1, ptr = ds.pointer(last);
    const int32_t len = load<int32_t>(ds.sizes_ + 4 * last);
    const int64_t bin_size = int64_t(ds.bin_.size);
    OCC_CHECK(ptr >= 0 && len >= 0 && ptr <= bin_size && int64_t(len) * ds.itemsize_ <= bin_size - ptr,
              "{} overruns {}: its last sequence ({} tokens at byte {}) does not fit in the .bin's {} bytes; the .bin "
              "is truncated or belongs to another dataset: {}",
              idx_path, bin_path, len, ptr, bin_size, kRegenerate);
    ds.num_tokens_ = (ptr + int64_t(len) * ds.itemsize_) / ds.itemsize_;
  }
  return ds;
}

void IndexedDataset::validate() const {
  const int64_t bin_size = int64_t(bin_.size);
  int64_t expected = 0;
  for (int64_t i = 0; i < num_sequences_; ++i) {
    const int32_t len = load<int32_t>(sizes_ + 4 * i);
    const int64_t ptr = pointer(i);
    OCC_CHECK(len >= 0, "{} is corrupt: sequence {} has negative size {}; {}", idx_path_, i, len, regenerate_command(prefix_));
    OCC_CHECK(ptr == expected,
              "{} is inconsistent: sequence {} starts at byte {} but the sizes before it end at byte {}; {}",
              idx_path_, i, ptr, expected, regenerate_command(prefix_));
    expected += int64_t(len) * itemsize_;
    OCC_CHECK(expected <= bin_size,
              "{} overruns {}.bin: sequence {} ends at byte {} but the .bin has {} bytes; the .bin is truncated or "
              "belongs to another dataset: {}",
              idx_path_, prefix_, i, expected, bin_size, regenerate_command(prefix_));
  }
  for (int64_t i = 1; i < num_doc_entries_; ++i)
    OCC_CHECK(document_start(i) >= document_start(i - 1),
              "{} has a bad doc_idx: entry {} ({}) is below entry {} ({}); {}", idx_path_, i, document_start(i), i - 1,
              document_start(i - 1), regenerate_command(prefix_));
}

int64_t IndexedDataset::document_start(int64_t d) const {
  OCC_CHECK(d >= 0 && d < num_doc_entries_, "internal: document entry {} out of range [0, {}) in {}", d,
            num_doc_entries_, prefix_);
  return load<int64_t>(doc_idx_ + 8 * d);
}

int64_t IndexedDataset::document_of(int64_t seq) const {
  // The last document starting at or before seq (empty documents before it share its start).
  OCC_CHECK(seq >= 0 && seq < num_sequences_, "internal: sequence {} out of range [0, {}) in {}", seq, num_sequences_,
            prefix_);
  int64_t lo = 0, hi = num_doc_entries_ - 1;  // start(lo) <= seq < start(hi) = num_sequences
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (document_start(mid) <= seq ? lo : hi) = mid;
  }
  return lo;
}

int64_t IndexedDataset::pointer(int64_t i) const { return load<int64_t>(pointers_ + 8 * i); }

void IndexedDataset::read(int64_t seq, int64_t offset, int64_t count, int32_t* out) const {
  const int64_t len = sequence_length(seq);
  OCC_CHECK(offset >= 0 && count >= 0 && offset + count <= len,
            "internal: read of tokens [{}, {}) from sequence {} of length {} in {}", offset, offset + count, seq, len,
            prefix_);
  if (count == 0) return;
  const int64_t ptr = pointer(seq), bin_size = int64_t(bin_.size);
  OCC_CHECK(ptr >= 0 && ptr <= bin_size && (offset + count) * itemsize_ <= bin_size - ptr,
            "{} is corrupt: sequence {} ({} tokens at byte {}) does not fit in {}.bin's {} bytes; {}", idx_path_, seq,
            len, ptr, prefix_, bin_size, regenerate_command(prefix_));
  const unsigned char* src = bin_.data + ptr + offset * itemsize_;
  switch (dtype_code_) {
    case 1: convert<uint8_t>(src, count, out); return;
    case 8: convert<uint16_t>(src, count, out); return;
    case 2: convert<int8_t>(src, count, out); break;
    case 3: convert<int16_t>(src, count, out); break;
    case 4: convert<int32_t>(src, count, out); break;
    case 5:
      for (int64_t i = 0; i < count; ++i) {
        const int64_t v = load<int64_t>(src + 8 * i);
        OCC_CHECK(v >= 0 && v <= std::numeric_limits<int32_t>::max(),
                  "{}.bin: token id {} in sequence {} does not fit int32; the dataset is corrupt or not token ids",
                  prefix_, v, seq);
        out[i] = int32_t(v);
      }
      return;
  }
  // Signed dtypes: a negative id would index outside the embedding table.
  for (int64_t i = 0; i < count; ++i)
    OCC_CHECK(out[i] >= 0, "{}.bin: token id {} in sequence {} is negative; the dataset is corrupt", prefix_, out[i],
              seq);
}

}  // namespace occ
