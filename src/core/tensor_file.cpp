#include "core/tensor_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>

#include "core/error.h"

namespace occ {

// Tensors are written as raw host memory; the format is little-endian.
static_assert(std::endian::native == std::endian::little, "tensor files assume a little-endian host");

namespace {

constexpr char kTensorFileMagic[8] = {'O', 'C', 'C', 'T', 'E', 'N', 'S', '1'};
constexpr uint64_t kPreamble = 16;  // magic + uint64 header length
constexpr uint64_t kTrailer = 4;    // uint32 header CRC
constexpr uint64_t kAlign = 64;

uint64_t align_up(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

uint32_t crc32_of(const void* data, uint64_t bytes, uint32_t crc = 0) {
  return static_cast<uint32_t>(crc32_z(crc, static_cast<const Bytef*>(data), static_cast<z_size_t>(bytes)));
}

std::string errno_text() { return std::strerror(errno); }

// Closes the descriptor on every path, including errors.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

void write_all(int fd, const void* data, uint64_t bytes, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd, p, std::min<uint64_t>(bytes, 1ull << 30));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("cannot write {}: {}; check that the disk has free space and the directory is writable", path, errno_text());
    p += n;
    bytes -= static_cast<uint64_t>(n);
  }
}

// Creates path + ".tmp", lets `body` fill it, then fsync + rename + fsync dir.
template <class Body>
void atomic_write(const std::string& path, Body&& body) {
  const std::string tmp = path + ".tmp";
  try {
    {
      Fd f(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
      if (f.fd < 0) fail("cannot create {}: {}; check that the directory exists and is writable", tmp, errno_text());
      body(f.fd, tmp);
      if (::fsync(f.fd) != 0) fail("cannot fsync {}: {}; check the disk", tmp, errno_text());
      int fd = std::exchange(f.fd, -1);
      if (::close(fd) != 0) fail("cannot close {}: {}; check that the disk has free space", tmp, errno_text());
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      fail("cannot rename {} to {}: {}; check the directory permissions", tmp, path, errno_text());
  } catch (...) {
    ::unlink(tmp.c_str());  // never leave a half-written temp file behind
    throw;
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  fsync_path(dir.empty() ? "." : dir);
}

DType parse_dtype(const std::string& s, const std::string& path) {
  if (s == "f32") return DType::F32;
  if (s == "i32") return DType::I32;
  if (s == "i64") return DType::I64;
  if (s == "u8") return DType::U8;
  fail("{} holds a tensor of dtype '{}', which this version of optimus-cc cannot read; use the version that wrote it", path, s);
}

// Element count, or -1 when a dimension is negative or the product overflows.
int64_t checked_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / 8 / d) return -1;
    n *= d;
  }
  return n;
}

[[noreturn]] void corrupted(const std::string& path, const std::string& what) {
  fail("checkpoint file {} is corrupted ({}); restore it or load an earlier checkpoint", path, what);
}

// A size read from a damaged header looks just like a short file, so unless
// the file is shorter than any valid one, the message admits both causes.
[[noreturn]] void truncated(const std::string& path, uint64_t have, uint64_t need, bool certain = false) {
  fail("{} is truncated: {} bytes, expected {}{}; restore it or load an earlier checkpoint", path, have, need,
       certain ? "" : " (or its header is damaged)");
}

// The data section's size from the first bytes of a header: the writer's JSON
// object has its keys sorted, so it starts {"data_bytes":N, (0: not there).
uint64_t data_bytes_from_header_start(const std::string& start) {
  const std::string key = "{\"data_bytes\":";
  if (start.rfind(key, 0) != 0) return 0;
  uint64_t n = 0;
  size_t i = key.size();
  for (; i < start.size() && i < key.size() + 19 && start[i] >= '0' && start[i] <= '9'; ++i) n = n * 10 + uint64_t(start[i] - '0');
  return i < start.size() && start[i] == ',' ? n : 0;
}

}  // namespace

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "f32";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::U8: return "u8";
  }
  return "?";
}

int64_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32: return 4;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U8: return 1;
  }
  return 0;
}

void fsync_path(const std::string& path) {
  Fd f(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (f.fd < 0) fail("cannot open {} to fsync it: {}; check that it exists and is readable", path, errno_text());
  if (::fsync(f.fd) != 0) fail("cannot fsync {}: {}; check the disk", path, errno_text());
}

void write_file_atomic(const std::string& path, std::string_view contents) {
  atomic_write(path, [&](int fd, const std::string& tmp) { write_all(fd, contents.data(), contents.size(), tmp); });
}

// ---- writer -----------------------------------------------------------------

TensorFileWriter::TensorFileWriter(nlohmann::json meta) : meta_(std::move(meta)) {
  OCC_CHECK(meta_.is_object(), "internal: tensor file metadata must be a JSON object");
}

TensorFileWriter::Entry TensorFileWriter::make_entry(const std::string& name, DType dtype, const void* data,
                                                    std::vector<int64_t> shape) const {
  OCC_CHECK(!name.empty(), "tensor file: a tensor needs a non-empty name");
  for (const Entry& e : entries_) OCC_CHECK(e.name != name, "tensor file: tensor '{}' was added twice; names must be unique", name);
  int64_t numel = checked_numel(shape);
  OCC_CHECK(numel >= 0, "tensor file: tensor '{}' has a negative or overflowing shape; pass its real dimensions", name);
  OCC_CHECK(numel == 0 || data != nullptr, "tensor file: tensor '{}' has {} elements but no data pointer", name, numel);
  Entry e;
  e.name = name;
  e.dtype = dtype;
  e.shape = std::move(shape);
  e.size = static_cast<uint64_t>(numel * dtype_size(dtype));
  e.crc32 = e.size > 0 ? crc32_of(data, e.size) : crc32_of(nullptr, 0);
  return e;
}

void TensorFileWriter::add_raw(const std::string& name, DType dtype, const void* data, std::vector<int64_t> shape) {
  Entry e = make_entry(name, dtype, data, std::move(shape));
  e.bytes.resize(e.size);
  if (e.size > 0) std::memcpy(e.bytes.data(), data, e.size);
  entries_.push_back(std::move(e));
}

void TensorFileWriter::add_view_raw(const std::string& name, DType dtype, std::shared_ptr<const void> owner,
                                    const void* data, std::vector<int64_t> shape) {
  OCC_CHECK(owner != nullptr, "internal: tensor file view '{}' without an owner", name);
  Entry e = make_entry(name, dtype, data, std::move(shape));
  e.owner = std::move(owner);
  e.view = data;
  entries_.push_back(std::move(e));
}

uint64_t TensorFileWriter::content_digest() const {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over each entry's identity and CRC
  auto mix = [&h](const void* data, size_t bytes) {
    for (size_t i = 0; i < bytes; ++i) h = (h ^ static_cast<const unsigned char*>(data)[i]) * 1099511628211ull;
  };
  for (const Entry& e : entries_) {
    mix(e.name.data(), e.name.size() + 1);
    mix(&e.dtype, sizeof e.dtype);
    for (int64_t d : e.shape) mix(&d, sizeof d);
    const uint64_t bytes = e.size;
    mix(&bytes, sizeof bytes);
    mix(&e.crc32, sizeof e.crc32);
  }
  return h;
}

void TensorFileWriter::write(const std::string& path) const {
  nlohmann::json tensors = nlohmann::json::array();
  std::vector<uint64_t> offsets;
  uint64_t offset = 0;
  for (const Entry& e : entries_) {
    offset = align_up(offset);
    offsets.push_back(offset);
    tensors.push_back({{"name", e.name},
                       {"dtype", dtype_name(e.dtype)},
                       {"shape", e.shape},
                       {"offset", offset},
                       {"bytes", e.size},
                       {"crc32", e.crc32}});
    offset += e.size;
  }
  const nlohmann::json header_json = {
      {"format_version", 1}, {"meta", meta_}, {"data_bytes", offset}, {"tensors", tensors}};
  const std::string header = header_json.dump();
  const uint64_t header_len = header.size();
  const uint64_t data_start = align_up(kPreamble + header_len);
  const uint32_t header_crc = crc32_of(header.data(), header.size());

  atomic_write(path, [&](int fd, const std::string& tmp) {
    static const char zeros[kAlign] = {};
    write_all(fd, kTensorFileMagic, sizeof kTensorFileMagic, tmp);
    write_all(fd, &header_len, sizeof header_len, tmp);
    write_all(fd, header.data(), header.size(), tmp);
    write_all(fd, zeros, data_start - kPreamble - header_len, tmp);
    uint64_t at = 0;  // position in the data section
    for (size_t i = 0; i < entries_.size(); ++i) {
      write_all(fd, zeros, offsets[i] - at, tmp);
      write_all(fd, entries_[i].data(), entries_[i].size, tmp);
      at = offsets[i] + entries_[i].size;
    }
    write_all(fd, &header_crc, sizeof header_crc, tmp);
  });
}

// ---- reader -----------------------------------------------------------------

TensorFileReader::TensorFileReader(TensorFileReader&& other) noexcept { *this = std::move(other); }

TensorFileReader& TensorFileReader::operator=(TensorFileReader&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    meta_ = std::move(other.meta_);
    entries_ = std::move(other.entries_);
    index_ = std::move(other.index_);
    data_start_ = other.data_start_;
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

TensorFileReader::~TensorFileReader() {
  if (fd_ >= 0) ::close(fd_);
}

TensorFileReader TensorFileReader::open(const std::string& path) {
  TensorFileReader r;
  r.path_ = path;
  r.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (r.fd_ < 0 && errno == ENOENT) fail("tensor file {} does not exist; check the path (and the --load directory)", path);
  if (r.fd_ < 0) fail("cannot open {}: {}; check its permissions", path, errno_text());
  struct stat st {};
  if (::fstat(r.fd_, &st) != 0) fail("cannot stat {}: {}; check the file", path, errno_text());
  OCC_CHECK(S_ISREG(st.st_mode), "{} is not a regular file; pass the path of a tensor file", path);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  char pre[kPreamble] = {};
  const uint64_t got = std::min<uint64_t>(size, kPreamble);
  r.read_at(0, pre, got);
  if (std::memcmp(pre, kTensorFileMagic, std::min<uint64_t>(got, sizeof kTensorFileMagic)) != 0)
    fail("{} is not an optimus-cc tensor file (bad magic); pass a file written by optimus-cc", path);
  if (size < kPreamble + kTrailer) truncated(path, size, kPreamble + kTrailer, /*certain=*/true);
  uint64_t header_len = 0;
  std::memcpy(&header_len, pre + sizeof kTensorFileMagic, sizeof header_len);
  // No real header approaches 4 GiB: such a length is a damaged field, not a short file.
  if (header_len > (1ull << 32)) corrupted(path, "implausible header length");
  if (header_len > size - kPreamble - kTrailer) {
    // Cut inside the header: its first bytes still give the data's size, hence the file's.
    std::string start(std::min<uint64_t>(size - kPreamble, 64), '\0');
    r.read_at(kPreamble, start.data(), start.size());
    const uint64_t data_bytes = data_bytes_from_header_start(start);
    if (data_bytes > 0 && data_bytes < (1ull << 60))
      truncated(path, size, align_up(kPreamble + header_len) + data_bytes + kTrailer);
    fail("{} is truncated: {} bytes, expected more than {} (its header alone); restore it or load an earlier "
         "checkpoint",
         path, size, kPreamble + header_len + kTrailer);
  }

  std::string header(header_len, '\0');
  r.read_at(kPreamble, header.data(), header_len);
  uint32_t stored_crc = 0;
  r.read_at(size - kTrailer, &stored_crc, sizeof stored_crc);
  nlohmann::json h = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
  r.data_start_ = align_up(kPreamble + header_len);

  // A parsable header that declares more data than the file has means the
  // file was cut short (its CRC trailer is gone), not that bytes were flipped.
  auto declared_size = [&]() -> uint64_t {
    if (!h.is_object() || !h.contains("data_bytes") || !h["data_bytes"].is_number_unsigned()) return 0;
    const uint64_t data_bytes = h["data_bytes"].get<uint64_t>();
    return data_bytes > (1ull << 60) ? 0 : r.data_start_ + data_bytes + kTrailer;
  };
  if (crc32_of(header.data(), header.size()) != stored_crc) {
    if (declared_size() > size) truncated(path, size, declared_size());
    corrupted(path, "header checksum mismatch");
  }
  if (h.is_discarded()) corrupted(path, "header is not valid JSON");
  if (declared_size() == 0 || declared_size() > size) corrupted(path, "header has no valid data_bytes");
  if (declared_size() < size) corrupted(path, fmt::format("{} unexpected trailing bytes", size - declared_size()));
  const uint64_t data_bytes = h["data_bytes"].get<uint64_t>();

  try {
    // meta is always an object (possibly empty), so readers can look keys up
    // without first checking its type (found by fuzz/tensor_file.cpp).
    r.meta_ = nlohmann::json::object();
    if (h.contains("meta")) {
      if (!h["meta"].is_object()) corrupted(path, "its meta is not a JSON object");
      r.meta_ = std::move(h["meta"]);
    }
    for (const auto& t : h.at("tensors")) {
      Entry e;
      e.name = t.at("name").get<std::string>();
      e.dtype = parse_dtype(t.at("dtype").get<std::string>(), path);
      e.shape = t.at("shape").get<std::vector<int64_t>>();
      e.offset = t.at("offset").get<uint64_t>();
      e.bytes = t.at("bytes").get<uint64_t>();
      e.crc32 = t.at("crc32").get<uint32_t>();
      e.numel = checked_numel(e.shape);
      const std::string what = fmt::format("tensor '{}' ", printable(e.name));
      if (e.numel < 0 || static_cast<uint64_t>(e.numel * dtype_size(e.dtype)) != e.bytes)
        corrupted(path, what + "size does not match its shape");
      if (e.offset > data_bytes || e.bytes > data_bytes - e.offset) corrupted(path, what + "lies outside the file");
      if (!r.index_.emplace(e.name, r.entries_.size()).second) corrupted(path, what + "appears twice");
      r.entries_.push_back(std::move(e));
    }
  } catch (const nlohmann::json::exception& ex) {
    corrupted(path, fmt::format("malformed header: {}", ex.what()));
  }
  return r;
}

std::vector<std::string> TensorFileReader::names() const {
  std::vector<std::string> out;
  for (const Entry& e : entries_) out.push_back(e.name);
  return out;
}

const TensorFileReader::Entry& TensorFileReader::entry(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    std::string held;
    for (size_t i = 0; i < entries_.size() && i < 8; ++i) held += (i ? ", " : "") + entries_[i].name;
    if (entries_.size() > 8) held += ", ...";
    fail("checkpoint file {} has no tensor '{}' (it holds: {}); it was saved by a different model configuration or version",
         path_, name, held.empty() ? "nothing" : held);
  }
  return entries_[it->second];
}

std::vector<int64_t> TensorFileReader::shape(const std::string& name) const { return entry(name).shape; }
int64_t TensorFileReader::numel(const std::string& name) const { return entry(name).numel; }
DType TensorFileReader::dtype(const std::string& name) const { return entry(name).dtype; }

void TensorFileReader::read_at(uint64_t pos, void* out, uint64_t bytes) const {
  char* p = static_cast<char*>(out);
  while (bytes > 0) {
    ssize_t n = ::pread(fd_, p, std::min<uint64_t>(bytes, 1ull << 30), static_cast<off_t>(pos));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("cannot read {}: {}; check the disk", path_, errno_text());
    if (n == 0) fail("{} is truncated (it shrank while being read); restore it or load an earlier checkpoint", path_);
    p += n;
    pos += static_cast<uint64_t>(n);
    bytes -= static_cast<uint64_t>(n);
  }
}

void TensorFileReader::read_raw(const std::string& name, DType dtype, void* out, int64_t expected_numel) const {
  const Entry& e = entry(name);
  OCC_CHECK(e.dtype == dtype, "tensor '{}' in {} is stored as {} but read as {}; the file was written by a different version of optimus-cc",
            name, path_, dtype_name(e.dtype), dtype_name(dtype));
  OCC_CHECK(e.numel == expected_numel,
            "tensor '{}' has {} elements in {} but this model expects {}: the checkpoint was saved with a different model shape (--hidden-size etc.)",
            name, e.numel, path_, expected_numel);
  read_at(data_start_ + e.offset, out, e.bytes);
  if (crc32_of(out, e.bytes) != e.crc32) corrupted(path_, fmt::format("tensor '{}' checksum mismatch", name));
}

void TensorFileReader::verify() const {
  uint64_t largest = 0;
  for (const Entry& e : entries_) largest = std::max(largest, e.bytes);
  std::vector<char> buf(std::min<uint64_t>(largest, 16ull << 20));  // bounded memory for huge tensors
  for (const Entry& e : entries_) {
    uint32_t crc = 0;
    for (uint64_t done = 0; done < e.bytes;) {
      const uint64_t n = std::min<uint64_t>(buf.size(), e.bytes - done);
      read_at(data_start_ + e.offset + done, buf.data(), n);
      crc = crc32_of(buf.data(), n, crc);
      done += n;
    }
    if (crc != e.crc32) corrupted(path_, fmt::format("tensor '{}' checksum mismatch", e.name));
  }
}

}  // namespace occ
