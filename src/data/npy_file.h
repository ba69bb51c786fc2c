#pragma once
// NumPy .npy files, the format of the data index cache (as Megatron's): written
// here so that numpy.load reads them, and mapped read-only so that every rank of
// a node shares one copy in the page cache instead of holding its own.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace occ {

enum class NpyType { Int16, Int32, UInt32, Int64 };

const char* npy_descr(NpyType type);  // "<i2", "<i4", "<u4", "<i8"
size_t npy_itemsize(NpyType type);
// Throws occ::Error for any other descr.
NpyType npy_type_from_descr(const std::string& descr);

// The checksum of a .npy file's bytes (header and data): XXH64 (core/xxhash64.h).
uint64_t npy_checksum(const void* bytes, size_t size);
// Flushes a folder's entries (a rename into it) to the disk; throws occ::Error.
void sync_folder(const std::string& folder);

// A new C-order .npy (format 1.0) of `shape`, filled in place through a shared
// mapping of its file (the array never sits in anonymous memory), under a
// temporary name in the target's folder; commit() checksums it, flushes it to
// the disk (msync, fsync) and only then renames it to `path`, so a crash never
// leaves a file of that name whose bytes did not reach the disk. The space is
// reserved up front, so a full disk is a clear error rather than a SIGBUS. An
// uncommitted writer removes its temporary file when destroyed.
class NpyWriter {
 public:
  // checksum: where commit() stores npy_checksum() of the file (null: nowhere).
  NpyWriter(const std::string& path, NpyType type, std::vector<int64_t> shape, uint64_t* checksum = nullptr);
  ~NpyWriter();
  NpyWriter(const NpyWriter&) = delete;
  NpyWriter& operator=(const NpyWriter&) = delete;

  template <class T>
  T* data() {
    return reinterpret_cast<T*>(data_);
  }
  int64_t elements() const { return elements_; }
  void commit();

 private:
  void release() noexcept;

  std::string path_, tmp_;
  uint64_t* checksum_ = nullptr;
  int fd_ = -1;
  unsigned char* map_ = nullptr;
  size_t map_size_ = 0;
  unsigned char* data_ = nullptr;
  int64_t elements_ = 0;
  bool committed_ = false;
};

// A .npy mapped read-only. open() checks the header (magic, version, a C-order
// dtype of ours, the shape) and that the file holds exactly the data it
// promises; any defect is a one-line occ::Error naming the file.
class NpyArray {
 public:
  static NpyArray open(const std::string& path);

  NpyArray() = default;
  NpyArray(NpyArray&& other) noexcept;
  NpyArray& operator=(NpyArray&& other) noexcept;
  NpyArray(const NpyArray&) = delete;
  NpyArray& operator=(const NpyArray&) = delete;
  ~NpyArray();

  NpyType type() const { return type_; }
  // npy_checksum() of the whole file (reads every byte: O(size)).
  uint64_t checksum() const;
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t elements() const { return elements_; }
  const std::string& path() const { return path_; }
  template <class T>
  const T* data() const {
    return reinterpret_cast<const T*>(data_);
  }
  // Element i as int64 whatever the stored integer type.
  int64_t at(int64_t i) const {
    switch (type_) {
      case NpyType::Int16: return data<int16_t>()[i];
      case NpyType::Int32: return data<int32_t>()[i];
      case NpyType::UInt32: return data<uint32_t>()[i];
      case NpyType::Int64: return data<int64_t>()[i];
    }
    return 0;
  }

 private:
  std::string path_;
  const unsigned char* map_ = nullptr;
  size_t map_size_ = 0;
  const unsigned char* data_ = nullptr;
  NpyType type_ = NpyType::Int32;
  std::vector<int64_t> shape_;
  int64_t elements_ = 0;
};

}  // namespace occ
