#include "core/safetensors.h"

#include <cstdio>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>

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
  std::error_code ec;
  OCC_CHECK(!std::filesystem::is_directory(path, ec), "cannot write {}: it is an existing directory; give a file name",
            path);
  try {
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      OCC_CHECK(out.good(), "cannot write {}; check that the directory exists and is writable", tmp);
      uint64_t len = text.size();
      out.write(reinterpret_cast<const char*>(&len), 8);
      out.write(text.data(), std::streamsize(text.size()));
      for (const auto& e : entries_) out.write(e.bytes.data(), std::streamsize(e.bytes.size()));
      out.flush();
      OCC_CHECK(out.good(), "writing {} failed; check that the disk has free space", tmp);
    }
    std::filesystem::rename(tmp, path, ec);
    OCC_CHECK(!ec, "cannot rename {} to {}: {}; check the directory permissions", tmp, path, ec.message());
  } catch (...) {
    std::filesystem::remove(tmp, ec);  // never a stray temporary
    throw;
  }
}

// ---- reader -----------------------------------------------------------------

namespace {
// Bytes per element of the format's dtypes; 0 for an unknown one.
int64_t safetensors_itemsize(const std::string& dtype) {
  static const std::map<std::string, int64_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I16", 2}, {"U16", 2},
      {"F16", 2},  {"BF16", 2}, {"I32", 4}, {"U32", 4},     {"F32", 4},     {"I64", 8}, {"U64", 8}, {"F64", 8}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

// A name taken from the file, fit for a one-line message.
std::string shown_key(const std::string& s) { return printable(s); }
}  // namespace

SafetensorsReader SafetensorsReader::open(const std::string& path, const std::string& fix) {
  constexpr uint64_t kMaxHeader = 100'000'000;  // the format's own limit
  SafetensorsReader r;
  r.path_ = path;
  std::ifstream in(path, std::ios::binary);
  OCC_CHECK(in.good(), "cannot open safetensors file {}; check the path", path);
  in.seekg(0, std::ios::end);
  const auto end_pos = in.tellg();
  OCC_CHECK(end_pos >= 0, "cannot read safetensors file {}; check that it is a regular file", path);
  const uint64_t size = uint64_t(end_pos);
  in.seekg(0);
  auto bad = [&path, &fix](const std::string& what) {
    fail("{} is not a valid safetensors file ({}); {}", path, what, fix);
  };
  if (size < 8) bad(fmt::format("{} bytes, shorter than the 8-byte header length", size));
  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  if (header_len > kMaxHeader) bad(fmt::format("header length {} is over the format's 100 MB limit", header_len));
  if (header_len > size - 8) bad(fmt::format("header length {} runs past the end of the {}-byte file", header_len, size));
  std::string header(header_len, '\0');
  in.read(header.data(), std::streamsize(header_len));
  r.data_.resize(size - 8 - header_len);
  in.read(r.data_.data(), std::streamsize(r.data_.size()));
  OCC_CHECK(in.good(), "cannot read safetensors file {}; check the disk", path);

  const nlohmann::json h = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (!h.is_object()) bad("the header is not a JSON object");
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const auto& [name, entry] : h.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) bad("__metadata__ is not an object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) bad(fmt::format("metadata '{}' is not a string", shown_key(key)));
        r.metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string who = fmt::format("tensor '{}'", shown_key(name));
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets"))
      bad(who + " lacks dtype, shape or data_offsets");
    const auto& dtype = entry["dtype"];
    const auto& shape = entry["shape"];
    const auto& offsets = entry["data_offsets"];
    if (!dtype.is_string() || safetensors_itemsize(dtype.get<std::string>()) == 0)
      bad(fmt::format("{} has an unknown dtype {}", who, shown_key(dtype.dump())));
    if (!shape.is_array()) bad(who + ": shape is not an array");
    Tensor t;
    t.dtype = dtype.get<std::string>();
    uint64_t numel = 1;
    for (const auto& d : shape) {
      if (!d.is_number_unsigned()) bad(who + ": a dimension is not a non-negative integer");
      const uint64_t v = d.get<uint64_t>();
      if (v != 0 && numel > (uint64_t(1) << 62) / v) bad(who + ": the shape's element count overflows");
      numel *= v;
      t.shape.push_back(int64_t(v));
    }
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned())
      bad(who + ": data_offsets is not [begin, end]");
    t.begin = offsets[0].get<uint64_t>();
    t.end = offsets[1].get<uint64_t>();
    if (t.begin > t.end || t.end > r.data_.size())
      bad(fmt::format("{}: data_offsets [{}, {}] are outside the {}-byte data", who, t.begin, t.end, r.data_.size()));
    const uint64_t itemsize = uint64_t(safetensors_itemsize(t.dtype));
    if (numel > std::numeric_limits<uint64_t>::max() / itemsize || t.end - t.begin != numel * itemsize)
      bad(fmt::format("{}: {} bytes for {} elements of {}", who, t.end - t.begin, numel, t.dtype));
    spans.emplace_back(t.begin, t.end);
    r.tensors_.emplace(name, std::move(t));
  }
  // The data holds the tensors back to back: no byte unaccounted for, none shared.
  std::sort(spans.begin(), spans.end());
  uint64_t at = 0;
  for (const auto& [b, e] : spans) {
    if (b != at) bad(fmt::format("the tensors {} at byte {} of the data", b > at ? "leave a gap" : "overlap", at));
    at = e;
  }
  if (at != r.data_.size()) bad(fmt::format("{} bytes of data after the last tensor", r.data_.size() - at));
  return r;
}

std::vector<std::string> SafetensorsReader::names() const {
  std::vector<std::string> out;
  for (const auto& [name, t] : tensors_) out.push_back(name);
  return out;
}

const SafetensorsReader::Tensor& SafetensorsReader::tensor(const std::string& name) const {
  auto it = tensors_.find(name);
  OCC_CHECK(it != tensors_.end(), "safetensors file {} has no tensor '{}'", path_, shown_key(name));
  return it->second;
}

std::vector<char> SafetensorsReader::read_bytes(const std::string& name) const {
  const Tensor& t = tensor(name);
  return std::vector<char>(data_.begin() + ptrdiff_t(t.begin), data_.begin() + ptrdiff_t(t.end));
}

std::vector<float> SafetensorsReader::read_f32(const std::string& name) const {
  const Tensor& t = tensor(name);
  OCC_CHECK(t.dtype == "F32", "safetensors file {}: tensor '{}' is {}, not F32", path_, shown_key(name), t.dtype);
  std::vector<float> values((t.end - t.begin) / sizeof(float));
  if (!values.empty()) std::memcpy(values.data(), data_.data() + t.begin, t.end - t.begin);
  return values;
}

}  // namespace occ
