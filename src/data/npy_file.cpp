#include "data/npy_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <random>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"
#include "core/xxhash64.h"

static_assert(std::endian::native == std::endian::little, ".npy arrays are written little-endian");

namespace occ {
namespace {

constexpr unsigned char kNpyMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
constexpr size_t kNpyAlign = 64;           // numpy's ARRAY_ALIGN
constexpr size_t kGrowthAxisDigits = 21;   // numpy's GROWTH_AXIS_MAX_DIGITS

// The header numpy.save (NumPy 1.24, format 1.0) writes for a C-order array:
// the dict, room for the first axis to grow, padding to 64 bytes, a newline.
std::string npy_header(NpyType type, const std::vector<int64_t>& shape) {
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) dims += fmt::format("{}{}", i ? ", " : "", shape[i]);
  if (shape.size() == 1) dims += ",";
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", npy_descr(type), dims);
  if (!shape.empty()) {
    const size_t digits = std::to_string(shape[0]).size();
    if (digits < kGrowthAxisDigits) dict.append(kGrowthAxisDigits - digits, ' ');
  }
  const size_t unpadded = sizeof(kNpyMagic) + 2 + 2 + dict.size() + 1;
  dict.append(kNpyAlign - unpadded % kNpyAlign, ' ');
  dict += '\n';
  std::string out(reinterpret_cast<const char*>(kNpyMagic), sizeof(kNpyMagic));
  out += char(1);
  out += char(0);
  const uint16_t len = uint16_t(dict.size());
  out += char(len & 0xff);
  out += char(len >> 8);
  return out + dict;
}

// The value of 'key' in a .npy header dict, up to the next top-level ", '" or "}".
std::string dict_value(const std::string& dict, const std::string& key) {
  const std::string quoted = "'" + key + "':";
  size_t at = dict.find(quoted);
  if (at == std::string::npos) return "";
  at += quoted.size();
  while (at < dict.size() && dict[at] == ' ') ++at;
  size_t end = at;
  int depth = 0;
  for (; end < dict.size(); ++end) {
    const char c = dict[end];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (depth == 0 && (c == ',' || c == '}')) break;
  }
  return dict.substr(at, end - at);
}

std::string random_suffix() {
  std::random_device rd;
  return fmt::format(".tmp-{}-{:08x}", ::getpid(), rd());
}

}  // namespace

const char* npy_descr(NpyType type) {
  switch (type) {
    case NpyType::Int16: return "<i2";
    case NpyType::Int32: return "<i4";
    case NpyType::UInt32: return "<u4";
    case NpyType::Int64: return "<i8";
  }
  return "?";
}

size_t npy_itemsize(NpyType type) {
  switch (type) {
    case NpyType::Int16: return 2;
    case NpyType::Int32: case NpyType::UInt32: return 4;
    case NpyType::Int64: return 8;
  }
  return 0;
}

NpyType npy_type_from_descr(const std::string& descr) {
  for (NpyType t : {NpyType::Int16, NpyType::Int32, NpyType::UInt32, NpyType::Int64})
    if (descr == npy_descr(t)) return t;
  fail("dtype '{}' is not one of the index dtypes <i2, <i4, <u4, <i8", descr);
}

uint64_t npy_checksum(const void* bytes, size_t size) { return xxhash64(bytes, size); }

void sync_folder(const std::string& folder) {
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  OCC_CHECK(fd >= 0, "cannot open folder {}: {}", folder, std::strerror(errno));
  const int synced = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some file systems cannot sync a folder (EINVAL): their renames are as durable as they get.
  OCC_CHECK(synced == 0 || err == EINVAL, "cannot flush folder {} to the disk: {}", folder, std::strerror(err));
}

// ---- writer -------------------------------------------------------------------------------

NpyWriter::NpyWriter(const std::string& path, NpyType type, std::vector<int64_t> shape, uint64_t* checksum)
    : path_(path), tmp_(path + random_suffix()), checksum_(checksum) {
  elements_ = 1;
  for (int64_t d : shape) {
    OCC_CHECK(d >= 0 && (d == 0 || elements_ <= std::numeric_limits<int64_t>::max() / d),
              "internal: .npy shape dimension {}", d);
    elements_ *= d;
  }
  const std::string header = npy_header(type, shape);
  const size_t bytes = header.size() + size_t(elements_) * npy_itemsize(type);
  fd_ = ::open(tmp_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  OCC_CHECK(fd_ >= 0, "cannot create {}: {}; pass a writable --data-cache-path", tmp_, std::strerror(errno));
  if (const int err = ::posix_fallocate(fd_, 0, off_t(bytes)); err != 0) {
    release();
    fail("cannot reserve {} bytes for {}: {}; free some space or pass --data-cache-path elsewhere", bytes, path,
         std::strerror(err));
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    release();
    fail("cannot map {}: {}", tmp_, std::strerror(err));
  }
  map_ = static_cast<unsigned char*>(p);
  map_size_ = bytes;
  std::memcpy(map_, header.data(), header.size());
  data_ = map_ + header.size();
}

NpyWriter::~NpyWriter() {
  if (!committed_) release();
}

void NpyWriter::release() noexcept {
  if (map_) ::munmap(map_, map_size_);
  map_ = nullptr;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!committed_) ::unlink(tmp_.c_str());
}

void NpyWriter::commit() {
  OCC_CHECK(!committed_ && map_, "internal: commit of {} twice", path_);
  if (checksum_) *checksum_ = npy_checksum(map_, map_size_);  // (just written: in the page cache)
  // The bytes reach the disk before the name does: a crash leaves a temporary, never a
  // named file of zeros (the description, written after, checks the checksum too).
  const int synced = ::msync(map_, map_size_, MS_SYNC) == 0 && ::fsync(fd_) == 0 ? 0 : errno;
  const int unmapped = ::munmap(map_, map_size_);
  map_ = nullptr;
  const int closed = ::close(fd_);
  fd_ = -1;
  if (synced != 0 || unmapped != 0 || closed != 0) {
    const int err = synced != 0 ? synced : errno;
    ::unlink(tmp_.c_str());
    fail("cannot write {}: {}; check free disk space", tmp_, std::strerror(err));
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    fail("cannot rename {} to {}: {}", tmp_, path_, std::strerror(err));
  }
  committed_ = true;
}

// ---- reader -------------------------------------------------------------------------------

NpyArray NpyArray::open(const std::string& path) {
  NpyArray a;
  a.path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  OCC_CHECK(fd >= 0, "cannot open {}: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size < 12) {
    ::close(fd);
    fail("{} is not a .npy file: {} bytes", path, int64_t(st.st_size));
  }
  void* p = ::mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);
  OCC_CHECK(p != MAP_FAILED, "cannot map {}: {}", path, std::strerror(err));
  a.map_ = static_cast<const unsigned char*>(p);
  a.map_size_ = size_t(st.st_size);

  const unsigned char* h = a.map_;
  OCC_CHECK(std::memcmp(h, kNpyMagic, sizeof(kNpyMagic)) == 0, "{} is not a .npy file (bad magic)", path);
  const int major = h[6];
  OCC_CHECK(major >= 1 && major <= 3, "{} has .npy format version {}.{}, not 1, 2 or 3", path, major, int(h[7]));
  size_t header_len = 0, prefix = 0;
  if (major == 1) {
    header_len = size_t(h[8]) | size_t(h[9]) << 8;
    prefix = 10;
  } else {
    uint32_t len32 = 0;
    std::memcpy(&len32, h + 8, 4);
    header_len = len32;
    prefix = 12;
  }
  OCC_CHECK(prefix + header_len <= a.map_size_, "{} is truncated inside its .npy header", path);
  const std::string dict(reinterpret_cast<const char*>(h + prefix), header_len);
  std::string descr = dict_value(dict, "descr");
  OCC_CHECK(descr.size() >= 2 && descr.front() == '\'' && descr.back() == '\'', "{} has no dtype in its header", path);
  try {
    a.type_ = npy_type_from_descr(descr.substr(1, descr.size() - 2));
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());
  }
  OCC_CHECK(dict_value(dict, "fortran_order") == "False", "{} is not a C-order array", path);
  std::string dims = dict_value(dict, "shape");
  OCC_CHECK(dims.size() >= 2 && dims.front() == '(' && dims.back() == ')', "{} has no shape in its header", path);
  dims = dims.substr(1, dims.size() - 2);
  a.elements_ = 1;
  size_t at = 0;
  while (at < dims.size()) {
    while (at < dims.size() && (dims[at] == ' ' || dims[at] == ',')) ++at;
    if (at == dims.size()) break;
    size_t used = 0;
    int64_t d = -1;
    try {
      d = std::stoll(dims.substr(at), &used);
    } catch (const std::exception&) {
    }
    OCC_CHECK(d >= 0 && used > 0, "{} has a malformed shape ({})", path, dims);
    OCC_CHECK(d == 0 || a.elements_ <= std::numeric_limits<int64_t>::max() / d, "{} has an impossible shape", path);
    a.shape_.push_back(d);
    a.elements_ *= d;
    at += used;
  }
  const size_t data_offset = prefix + header_len;
  const size_t want = data_offset + size_t(a.elements_) * npy_itemsize(a.type_);
  OCC_CHECK(want == a.map_size_, "{} holds {} bytes, but its header promises {} (shape ({}) of {}); it is truncated",
            path, a.map_size_, want, dims, npy_descr(a.type_));
  OCC_CHECK(data_offset % npy_itemsize(a.type_) == 0, "{} has unaligned data", path);
  a.data_ = a.map_ + data_offset;
  return a;
}

uint64_t NpyArray::checksum() const { return npy_checksum(map_, map_size_); }

NpyArray::NpyArray(NpyArray&& o) noexcept { *this = std::move(o); }

NpyArray& NpyArray::operator=(NpyArray&& o) noexcept {
  if (this == &o) return *this;
  if (map_) ::munmap(const_cast<unsigned char*>(map_), map_size_);
  path_ = std::move(o.path_);
  map_ = std::exchange(o.map_, nullptr);
  map_size_ = std::exchange(o.map_size_, 0);
  data_ = std::exchange(o.data_, nullptr);
  type_ = o.type_;
  shape_ = std::move(o.shape_);
  elements_ = std::exchange(o.elements_, 0);
  return *this;
}

NpyArray::~NpyArray() {
  if (map_) ::munmap(const_cast<unsigned char*>(map_), map_size_);
}

}  // namespace occ
