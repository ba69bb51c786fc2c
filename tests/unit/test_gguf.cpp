// The GGUF writer's byte layout (core/gguf.h) without llama.cpp (cli.llama_cpp runs the files
// in llama.cpp itself): header, metadata encoding, tensor infos with dimensions fastest first,
// 32-byte aligned offsets, and llama.cpp's Q8_0 block (fp16 scale max|x|/127, 32 rounded codes).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/gguf.h"
#include "core/precision.h"
#include "temp_dir.h"

namespace {

template <class T>
T at(const std::string& b, size_t& pos) {
  T v;
  std::memcpy(&v, b.data() + pos, sizeof(T));
  pos += sizeof(T);
  return v;
}
std::string str(const std::string& b, size_t& pos) {
  const uint64_t n = at<uint64_t>(b, pos);
  std::string s = b.substr(pos, n);
  pos += n;
  return s;
}

TEST(Gguf, Q8_0BlockIsLlamaCpps) {
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[size_t(i)] = float(i - 16) * 0.25f + (i == 5 ? 0.0625f : 0.0f);
  std::vector<uint8_t> q;
  occ::quantize_q8_0(x.data(), 32, q);
  ASSERT_EQ(q.size(), 34u);
  uint16_t h;
  std::memcpy(&h, q.data(), 2);
  const float d = 4.0f / 127.0f;  // max |x| = 16 * 0.25
  EXPECT_EQ(h, occ::fp16_bits(d));
  for (int i = 0; i < 32; ++i) EXPECT_EQ(int8_t(q[size_t(2 + i)]), int8_t(std::lround(x[size_t(i)] * (1.0f / d)))) << i;
  std::vector<float> y(32);
  occ::dequantize_q8_0(q.data(), 32, y.data());
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(y[size_t(i)], x[size_t(i)], 0.5f * d + 1e-3f) << i;
  std::vector<float> zeros(32, 0.0f);
  q.clear();
  occ::quantize_q8_0(zeros.data(), 32, q);
  for (uint8_t b : q) EXPECT_EQ(b, 0);
}

TEST(Gguf, LayoutHeaderMetadataTensors) {
  occ::test::TempDir dir;
  const std::string path = (dir.path / "m.gguf").string();
  occ::GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_u32("llama.block_count", 2);
  w.add_f32("llama.rope.freq_base", 10000.0f);
  w.add_strings("tokenizer.ggml.tokens", {"a", "bc"});
  std::vector<float> m(3 * 32);
  for (size_t i = 0; i < m.size(); ++i) m[i] = float(i) / 7.0f;
  w.add_tensor("t.weight", m, {3, 32}, occ::GgmlType::F16);
  w.add_tensor("n.weight", {1.0f, 2.0f, 3.0f}, {3}, occ::GgmlType::F32);
  w.write(path);
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string b = ss.str();
  size_t pos = 0;
  EXPECT_EQ(b.substr(0, 4), "GGUF");
  pos = 4;
  EXPECT_EQ(at<uint32_t>(b, pos), 3u);
  EXPECT_EQ(at<uint64_t>(b, pos), 2u);  // tensors
  EXPECT_EQ(at<uint64_t>(b, pos), 4u);  // metadata
  EXPECT_EQ(str(b, pos), "general.architecture");
  EXPECT_EQ(at<uint32_t>(b, pos), 8u);  // string
  EXPECT_EQ(str(b, pos), "llama");
  EXPECT_EQ(str(b, pos), "llama.block_count");
  EXPECT_EQ(at<uint32_t>(b, pos), 4u);  // u32
  EXPECT_EQ(at<uint32_t>(b, pos), 2u);
  EXPECT_EQ(str(b, pos), "llama.rope.freq_base");
  EXPECT_EQ(at<uint32_t>(b, pos), 6u);  // f32
  EXPECT_EQ(at<float>(b, pos), 10000.0f);
  EXPECT_EQ(str(b, pos), "tokenizer.ggml.tokens");
  EXPECT_EQ(at<uint32_t>(b, pos), 9u);  // array
  EXPECT_EQ(at<uint32_t>(b, pos), 8u);  // of strings
  EXPECT_EQ(at<uint64_t>(b, pos), 2u);
  EXPECT_EQ(str(b, pos), "a");
  EXPECT_EQ(str(b, pos), "bc");
  EXPECT_EQ(str(b, pos), "t.weight");
  EXPECT_EQ(at<uint32_t>(b, pos), 2u);
  EXPECT_EQ(at<uint64_t>(b, pos), 32u);  // fastest first
  EXPECT_EQ(at<uint64_t>(b, pos), 3u);
  EXPECT_EQ(at<uint32_t>(b, pos), 1u);  // F16
  EXPECT_EQ(at<uint64_t>(b, pos), 0u);
  EXPECT_EQ(str(b, pos), "n.weight");
  EXPECT_EQ(at<uint32_t>(b, pos), 1u);
  EXPECT_EQ(at<uint64_t>(b, pos), 3u);
  EXPECT_EQ(at<uint32_t>(b, pos), 0u);    // F32
  EXPECT_EQ(at<uint64_t>(b, pos), 192u);  // 96 values x 2 bytes, already a multiple of 32
  const size_t data = (pos + 31) / 32 * 32;
  for (size_t i = pos; i < data; ++i) EXPECT_EQ(b[i], '\0');
  uint16_t h;
  std::memcpy(&h, b.data() + data + 2 * 5, 2);
  EXPECT_EQ(h, occ::fp16_bits(m[5]));
  float v;
  std::memcpy(&v, b.data() + data + 192 + 4, 4);
  EXPECT_EQ(v, 2.0f);
  EXPECT_EQ(b.size(), data + 192 + 32);  // the last tensor padded too
  EXPECT_THROW(occ::parse_ggml_type("q4_0"), occ::Error);
}

}  // namespace
