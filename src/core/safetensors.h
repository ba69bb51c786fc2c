#pragma once
// Safetensors (Hugging Face format: u64 header length, JSON header of
// {name: {dtype, shape, data_offsets}} plus an optional "__metadata__" map of
// strings, then the raw little-endian data): a writer, and a reader that
// validates a file completely before handing out any tensor.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace occ {

class SafetensorsWriter {
 public:
  void add_f32(const std::string& name, const float* data, std::vector<int64_t> shape);
  void add_i32(const std::string& name, const int32_t* data, std::vector<int64_t> shape);
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  void write(const std::string& path) const;  // atomically (temporary name, then rename)

 private:
  struct Entry {
    std::string name, dtype;
    std::vector<int64_t> shape;
    std::vector<char> bytes;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Reads a whole file into memory and validates it as the format requires: a
// header of at most 100 MB that is one JSON object; every tensor with a known
// dtype, non-negative dimensions and data_offsets [begin, end] inside the data
// whose length matches the shape; the tensors covering the data exactly, with
// no gap or overlap; metadata values that are strings. Any defect is a
// one-line occ::Error naming the file and the tensor.
class SafetensorsReader {
 public:
  // `fix`: what a message about a malformed file advises (the file's origin decides it).
  static SafetensorsReader open(const std::string& path, const std::string& fix = "export it again");

  std::vector<std::string> names() const;  // sorted
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  const std::string& dtype(const std::string& name) const { return tensor(name).dtype; }
  const std::vector<int64_t>& shape(const std::string& name) const { return tensor(name).shape; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // An F32 tensor's values (throws for another dtype).
  std::vector<float> read_f32(const std::string& name) const;
  // Any tensor's raw bytes.
  std::vector<char> read_bytes(const std::string& name) const;

 private:
  struct Tensor {
    std::string dtype;
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0;  // in the data section
  };
  const Tensor& tensor(const std::string& name) const;

  std::string path_;
  std::vector<char> data_;  // the data section
  std::map<std::string, Tensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace occ
