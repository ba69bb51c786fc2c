#pragma once
// Tensor files: named arrays plus JSON metadata in one self-checking binary
// file, used for checkpoint shards and compressor state.
//
// Layout (integers little-endian):
//   "OCCTENS1" | uint64 header_len | header JSON (header_len bytes)
//   | zero padding to a 64-byte boundary | data section | uint32 crc32(header JSON)
// Header: {"format_version": 1, "meta": {...}, "data_bytes": N,
//          "tensors": [{"name", "dtype", "shape", "offset", "bytes", "crc32"}]}
// Offsets are relative to the data section and 64-byte aligned (mmap-friendly).
// The header CRC sits at the end so a file cut short anywhere fails to verify.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace occ {

enum class DType : uint8_t { F32, I32, I64, U8 };

const char* dtype_name(DType dtype);  // "f32", "i32", "i64", "u8"
int64_t dtype_size(DType dtype);      // bytes per element

template <class T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::F32; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::I32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::I64; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::U8; };

// The element types a tensor file stores.
template <class T>
concept TensorElement = requires { DTypeOf<T>::value; };

class TensorFileWriter {
 public:
  explicit TensorFileWriter(nlohmann::json meta = nlohmann::json::object());

  // Copies the data now, so the caller may reuse its buffer before write().
  // An empty shape {} is a scalar (one element).
  template <TensorElement T>
  void add(const std::string& name, const T* data, std::vector<int64_t> shape) {
    add_raw(name, DTypeOf<T>::value, data, std::move(shape));
  }
  template <TensorElement T>
  void add(const std::string& name, const std::vector<T>& values) {
    add_raw(name, DTypeOf<T>::value, values.data(), {static_cast<int64_t>(values.size())});
  }
  // Without a copy: the tensor is data[0, numel(shape)), which lies inside
  // *owner; the writer keeps owner alive until it is destroyed. For a snapshot
  // already copied once (a checkpoint's host copy of a whole buffer, whose
  // slices are its tensors), so that it is not copied again.
  template <TensorElement T>
  void add_view(const std::string& name, std::shared_ptr<const std::vector<T>> owner, const T* data,
                std::vector<int64_t> shape) {
    add_view_raw(name, DTypeOf<T>::value, std::move(owner), data, std::move(shape));
  }

  // Sets (or replaces) one metadata field before write().
  void set_meta(const std::string& key, nlohmann::json value) { meta_[key] = std::move(value); }
  // A 64-bit digest of the tensors added so far (names, dtypes, shapes and data,
  // through their CRC32s): equal for equal contents. Not of the metadata.
  uint64_t content_digest() const;

  // Atomic: writes path + ".tmp", fsyncs it, renames it over path and fsyncs
  // the directory, so path holds either the old file or the complete new one.
  void write(const std::string& path) const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;    // a copy (add), or
    std::shared_ptr<const void> owner;  // what view points into (add_view)
    const void* view = nullptr;
    uint64_t size = 0;
    uint32_t crc32 = 0;  // computed when added: content_digest() (a save's identifier) needs it before write()
    const void* data() const { return owner ? view : static_cast<const void*>(bytes.data()); }
  };
  // The checks of both, and the entry without its data.
  Entry make_entry(const std::string& name, DType dtype, const void* data, std::vector<int64_t> shape) const;
  void add_raw(const std::string& name, DType dtype, const void* data, std::vector<int64_t> shape);
  void add_view_raw(const std::string& name, DType dtype, std::shared_ptr<const void> owner, const void* data,
                    std::vector<int64_t> shape);

  nlohmann::json meta_;
  std::vector<Entry> entries_;
};

class TensorFileReader {
 public:
  // Verifies magic, header length, header CRC and every tensor's bounds; the
  // tensor data CRCs are checked when each tensor is read (or by verify()).
  static TensorFileReader open(const std::string& path);

  TensorFileReader(TensorFileReader&& other) noexcept;
  TensorFileReader& operator=(TensorFileReader&& other) noexcept;
  TensorFileReader(const TensorFileReader&) = delete;
  TensorFileReader& operator=(const TensorFileReader&) = delete;
  ~TensorFileReader();

  const std::string& path() const { return path_; }
  const nlohmann::json& meta() const { return meta_; }
  bool has(const std::string& name) const { return index_.count(name) != 0; }
  std::vector<std::string> names() const;  // in file order
  std::vector<int64_t> shape(const std::string& name) const;
  int64_t numel(const std::string& name) const;
  DType dtype(const std::string& name) const;

  // Reads tensor `name` into out[0 .. expected_numel). Fails with a one-line
  // error when the tensor is missing, has another dtype or element count, or
  // its checksum does not match (out may then hold the damaged bytes).
  template <TensorElement T>
  void read(const std::string& name, T* out, int64_t expected_numel) const {
    read_raw(name, DTypeOf<T>::value, out, expected_numel);
  }
  // For tensors whose size the caller does not know in advance.
  template <TensorElement T>
  std::vector<T> read_vector(const std::string& name) const {
    std::vector<T> values(static_cast<size_t>(numel(name)));
    read_raw(name, DTypeOf<T>::value, values.data(), static_cast<int64_t>(values.size()));
    return values;
  }

  // Checks every tensor's checksum without keeping the data.
  void verify() const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    int64_t numel;
    uint64_t offset;  // relative to the data section
    uint64_t bytes;
    uint32_t crc32;
  };
  TensorFileReader() = default;
  const Entry& entry(const std::string& name) const;
  void read_raw(const std::string& name, DType dtype, void* out, int64_t expected_numel) const;
  void read_at(uint64_t file_pos, void* out, uint64_t bytes) const;

  std::string path_;
  nlohmann::json meta_;
  std::vector<Entry> entries_;
  std::map<std::string, size_t> index_;
  uint64_t data_start_ = 0;
  int fd_ = -1;  // kept open so a concurrent rename over path cannot mix files
};

// Durability helpers shared with the checkpoint store.
void fsync_path(const std::string& path);  // a file or a directory
// Writes path + ".tmp", fsyncs, renames over path, fsyncs the directory.
void write_file_atomic(const std::string& path, std::string_view contents);

}  // namespace occ
