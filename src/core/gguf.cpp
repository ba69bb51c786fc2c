#include "core/gguf.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/precision.h"
#include "core/tensor_file.h"

namespace occ {

namespace {

constexpr uint32_t kAlignment = 32;  // GGUF's default general.alignment
constexpr uint32_t kVersion = 3;
// GGUF metadata value types.
enum : uint32_t { kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9 };

template <class T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}
int64_t padded(int64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

}  // namespace

const char* ggml_type_name(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return "f32";
    case GgmlType::F16: return "f16";
    case GgmlType::BF16: return "bf16";
    case GgmlType::Q8_0: return "q8_0";
  }
  return "?";
}

GgmlType parse_ggml_type(const std::string& name) {
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0})
    if (name == ggml_type_name(t)) return t;
  throw UsageError(fmt::format("--gguf-type {} is not known; use f32, f16, bf16 or q8_0", name));
}

int64_t ggml_row_bytes(GgmlType t, int64_t n) {
  switch (t) {
    case GgmlType::F32: return 4 * n;
    case GgmlType::F16:
    case GgmlType::BF16: return 2 * n;
    case GgmlType::Q8_0: return n / kQ8BlockSize * (2 + kQ8BlockSize);
  }
  return 0;
}

void quantize_q8_0(const float* x, int64_t n, std::vector<uint8_t>& out) {
  OCC_CHECK(n % kQ8BlockSize == 0, "internal: q8_0 of {} values (not a multiple of {})", n, kQ8BlockSize);
  const size_t start = out.size();
  out.resize(start + size_t(ggml_row_bytes(GgmlType::Q8_0, n)));
  uint8_t* p = out.data() + start;
  for (int64_t b = 0; b < n; b += kQ8BlockSize, p += 2 + kQ8BlockSize) {
    float amax = 0.0f;
    for (int j = 0; j < kQ8BlockSize; ++j) amax = std::max(amax, std::fabs(x[b + j]));
    // As llama.cpp's quantize_row_q8_0_ref: codes from the fp32 scale, the scale stored as fp16.
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t h = fp16_bits(d);
    std::memcpy(p, &h, 2);
    for (int j = 0; j < kQ8BlockSize; ++j) p[2 + j] = uint8_t(int8_t(std::lround(x[b + j] * id)));
  }
}

void dequantize_q8_0(const uint8_t* blocks, int64_t n, float* y) {
  for (int64_t b = 0; b < n; b += kQ8BlockSize, blocks += 2 + kQ8BlockSize) {
    uint16_t h;
    std::memcpy(&h, blocks, 2);
    const float d = fp16_value(h);
    for (int j = 0; j < kQ8BlockSize; ++j) y[b + j] = d * float(int8_t(blocks[2 + j]));
  }
}

void GgufWriter::key(const std::string& k, uint32_t type) {
  put_string(kv_, k);
  put<uint32_t>(kv_, type);
  ++kv_count_;
}
void GgufWriter::add_u32(const std::string& k, uint32_t v) { key(k, kU32), put(kv_, v); }
void GgufWriter::add_i32(const std::string& k, int32_t v) { key(k, kI32), put(kv_, v); }
void GgufWriter::add_f32(const std::string& k, float v) { key(k, kF32), put(kv_, v); }
void GgufWriter::add_bool(const std::string& k, bool v) { key(k, kBool), put<uint8_t>(kv_, v ? 1 : 0); }
void GgufWriter::add_string(const std::string& k, const std::string& v) { key(k, kString), put_string(kv_, v); }
void GgufWriter::add_strings(const std::string& k, const std::vector<std::string>& v) {
  key(k, kArray);
  put<uint32_t>(kv_, kString);
  put<uint64_t>(kv_, v.size());
  for (const auto& s : v) put_string(kv_, s);
}
void GgufWriter::add_f32s(const std::string& k, const std::vector<float>& v) {
  key(k, kArray);
  put<uint32_t>(kv_, kF32);
  put<uint64_t>(kv_, v.size());
  for (float x : v) put(kv_, x);
}
void GgufWriter::add_i32s(const std::string& k, const std::vector<int32_t>& v) {
  key(k, kArray);
  put<uint32_t>(kv_, kI32);
  put<uint64_t>(kv_, v.size());
  for (int32_t x : v) put(kv_, x);
}

void GgufWriter::add_tensor(const std::string& name, const std::vector<float>& data, const std::vector<int64_t>& shape,
                            GgmlType type) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  OCC_CHECK(n == int64_t(data.size()) && !shape.empty(), "internal: tensor {} of {} values for its shape", name,
            data.size());
  OCC_CHECK(type != GgmlType::Q8_0 || shape.back() % kQ8BlockSize == 0,
            "internal: q8_0 tensor {} has rows of {} values (not a multiple of {})", name, shape.back(), kQ8BlockSize);
  Tensor t{name, shape, type, {}};
  t.bytes.reserve(size_t(ggml_row_bytes(type, n)));
  switch (type) {
    case GgmlType::F32:
      t.bytes.resize(size_t(n) * 4);
      std::memcpy(t.bytes.data(), data.data(), t.bytes.size());
      break;
    case GgmlType::F16:
    case GgmlType::BF16:
      t.bytes.resize(size_t(n) * 2);
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = type == GgmlType::F16 ? fp16_bits(data[size_t(i)]) : bf16_bits(data[size_t(i)]);
        std::memcpy(t.bytes.data() + 2 * i, &h, 2);
      }
      break;
    case GgmlType::Q8_0:
      quantize_q8_0(data.data(), n, t.bytes);
      break;
  }
  tensors_.push_back(std::move(t));
}

void GgufWriter::write(const std::string& path) const {
  std::string out;
  out += "GGUF";
  put<uint32_t>(out, kVersion);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, uint64_t(kv_count_));
  out += kv_;
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    put_string(out, t.name);
    put<uint32_t>(out, uint32_t(t.shape.size()));
    for (auto d = t.shape.rbegin(); d != t.shape.rend(); ++d) put<uint64_t>(out, uint64_t(*d));  // fastest first
    put<uint32_t>(out, uint32_t(t.type));
    put<uint64_t>(out, offset);
    offset += uint64_t(padded(int64_t(t.bytes.size())));
  }
  out.resize(size_t(padded(int64_t(out.size()))), '\0');
  for (const Tensor& t : tensors_) {
    out.append(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
    out.resize(size_t(padded(int64_t(out.size()))), '\0');
  }
  write_file_atomic(path, out);
}

}  // namespace occ
