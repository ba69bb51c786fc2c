#include "core/safetensors.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace occ {

namespace {
template <class T>
std::vector<char> to_bytes(const T* data, const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  std::vector<char> b(size_t(n) * sizeof(T));
  if (n) std::memcpy(b.data(), data, b.size());
  return b;
}
}  // namespace

void SafetensorsWriter::add_f32(const std::string& name, const float* data, std::vector<int64_t> shape) {
  entries_.push_back({name, "F32", shape, to_bytes(data, shape)});
}

void SafetensorsWriter::add_i32(const std::string& name, const int32_t* data, std::vector<int64_t> shape) {
  entries_.push_back({name, "I32", shape, to_bytes(data, shape)});
}

void SafetensorsWriter::write(const std::string& path) const {
  nlohmann::ordered_json header;
  uint64_t offset = 0;
  for (const auto& e : entries_) {
    header[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.bytes.size()}}};
    offset += e.bytes.size();
  }
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data 8-byte aligned
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    OCC_CHECK(out.good(), "cannot write {}; check that the directory exists and is writable", tmp);
    uint64_t len = text.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out.write(text.data(), std::streamsize(text.size()));
    for (const auto& e : entries_) out.write(e.bytes.data(), std::streamsize(e.bytes.size()));
    OCC_CHECK(out.good(), "writing {} failed (disk full?)", tmp);
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace occ
