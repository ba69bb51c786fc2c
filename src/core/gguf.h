#pragma once
// GGUF (version 3), the file format of llama.cpp and the tools built on it
// (Ollama, LM Studio): a writer. Layout, all little-endian:
//   "GGUF", u32 version, u64 tensor count, u64 metadata count;
//   metadata: key (u64 length + bytes), u32 value type, value (arrays: u32
//   element type, u64 count, elements);
//   tensor infos: name, u32 dims, u64 dims fastest-varying first, u32 ggml
//   type, u64 offset into the data section (a multiple of the alignment);
//   zero padding to the alignment (general.alignment, 32), then the data.
// Weights are added as fp32 values with their ggml storage type; F16, BF16
// (round to nearest even) and Q8_0 (llama.cpp's block: an fp16 scale
// d = max|x| / 127 and 32 int8 round(x / d)) are encoded here.
#include <cstdint>
#include <string>
#include <vector>

namespace occ {

enum class GgmlType : uint32_t { F32 = 0, F16 = 1, Q8_0 = 8, BF16 = 30 };
const char* ggml_type_name(GgmlType t);
// "f32" | "f16" | "bf16" | "q8_0"; throws a one-line occ::Error otherwise.
GgmlType parse_ggml_type(const std::string& name);
// Bytes of n values of type t (Q8_0: n a multiple of 32).
int64_t ggml_row_bytes(GgmlType t, int64_t n);

// llama.cpp's Q8_0 block of 32 values, and its decoding (tests, reports).
constexpr int kQ8BlockSize = 32;
void quantize_q8_0(const float* x, int64_t n, std::vector<uint8_t>& out);
void dequantize_q8_0(const uint8_t* blocks, int64_t n, float* y);

class GgufWriter {
 public:
  void add_u32(const std::string& key, uint32_t v);
  void add_i32(const std::string& key, int32_t v);
  void add_f32(const std::string& key, float v);
  void add_bool(const std::string& key, bool v);
  void add_string(const std::string& key, const std::string& v);
  void add_strings(const std::string& key, const std::vector<std::string>& v);
  void add_f32s(const std::string& key, const std::vector<float>& v);
  void add_i32s(const std::string& key, const std::vector<int32_t>& v);
  // A tensor of torch shape `shape` (slowest first, row-major data), stored as
  // `type` (GGUF lists the dimensions reversed). Throws for Q8_0 when the last
  // dimension is not a multiple of 32.
  void add_tensor(const std::string& name, const std::vector<float>& data, const std::vector<int64_t>& shape,
                  GgmlType type);
  // Writes the file atomically (temporary name, then rename).
  void write(const std::string& path) const;
  int64_t tensor_count() const { return int64_t(tensors_.size()); }

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
    GgmlType type;
    std::vector<uint8_t> bytes;
  };
  void key(const std::string& k, uint32_t type);
  std::string kv_;  // the encoded metadata
  int64_t kv_count_ = 0;
  std::vector<Tensor> tensors_;
};

}  // namespace occ
