#pragma once
// Minimal safetensors writer (Hugging Face format: u64 header length, JSON
// header of {name: {dtype, shape, data_offsets}}, raw little-endian data).
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

}  // namespace occ
