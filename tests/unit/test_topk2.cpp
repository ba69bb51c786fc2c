// topk2 (compress/topk2_compressor.h): top-k per chunk of 4096 values with
// 2-bit values (sign + high/low magnitude against two bf16 means per chunk).
// Its encoder and decoder against a reference written here from the header's
// definition (a full sort instead of nth_element, a bit-by-bit packer), byte
// counts with the indices, ties, -0, non-finite chunks, and error feedback.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "compress/compressor_factory.h"
#include "compress/error_feedback.h"
#include "compress/powersgd.h"
#include "compress/topk2_compressor.h"
#include "core/error.h"
#include "core/precision.h"

#include "compressor_test_util.h"

namespace occ {
namespace {

using test::gaussian;
constexpr int64_t C = Topk2Compressor::kChunk;

struct RefChunk {
  std::vector<int64_t> index;  // ascending
  std::vector<int> code;       // bit 0 sign, bit 1 high
  uint16_t lo = 0, hi = 0;
};

// The definition, spelled out: sort the whole chunk by (|x| bits desc, index asc).
std::vector<RefChunk> reference_encode(const std::vector<float>& m, double density) {
  const int64_t n = int64_t(m.size());
  std::vector<RefChunk> out;
  for (int64_t off = 0; off < n; off += C) {
    const int64_t len = std::min(C, n - off);
    const int64_t k = std::clamp<int64_t>(std::llround(density * double(len)), 1, len);
    std::vector<int64_t> all(static_cast<size_t>(len));
    for (int64_t i = 0; i < len; ++i) all[size_t(i)] = i;
    auto mag = [&](int64_t i) { return float_bits(m[size_t(off + i)]) & 0x7fffffffu; };
    std::stable_sort(all.begin(), all.end(), [&](int64_t a, int64_t b) { return mag(a) > mag(b); });
    RefChunk c;
    double shi = 0, slo = 0;
    bool finite = true;
    const int64_t high = k / 2;
    std::vector<std::pair<int64_t, int>> sel;
    for (int64_t r = 0; r < k; ++r) {
      const int64_t i = all[size_t(r)];
      const float x = m[size_t(off + i)];
      finite = finite && std::isfinite(x);
      (r < high ? shi : slo) += std::fabs(double(x));
      sel.push_back({i, (std::signbit(x) ? 1 : 0) + (r < high ? 2 : 0)});
    }
    std::sort(sel.begin(), sel.end());
    for (auto [i, code] : sel) c.index.push_back(i), c.code.push_back(code);
    c.lo = finite ? uint16_t(float_bits(round_bf16(float(slo / double(k - high)))) >> 16) : 0x7FC0;
    c.hi = finite ? (high ? uint16_t(float_bits(round_bf16(float(shi / double(high)))) >> 16) : 0) : 0x7FC0;
    out.push_back(c);
  }
  return out;
}

std::vector<uint8_t> reference_wire(const std::vector<RefChunk>& chunks, int64_t n) {
  int64_t K = 0;
  for (const auto& c : chunks) K += int64_t(c.index.size());
  int b = 1;
  while ((int64_t(1) << b) < std::min(C, n)) ++b;  // smallest b with 2^b >= min(C, n)
  const int64_t nc = int64_t(chunks.size());
  const int64_t idx_bytes = (K * b + 7) / 8, code_bytes = (2 * K + 7) / 8;
  std::vector<uint8_t> w(size_t((4 * nc + idx_bytes + code_bytes + 3) / 4 * 4), 0);
  int64_t bit_i = 8 * 4 * nc, bit_c = 8 * (4 * nc + idx_bytes);
  auto put = [&w](int64_t& bit, uint64_t v, int nbits) {
    for (int j = 0; j < nbits; ++j, ++bit)
      if (v >> j & 1) w[size_t(bit / 8)] |= uint8_t(1 << (bit % 8));
  };
  for (int64_t c = 0; c < nc; ++c) {
    const RefChunk& ch = chunks[size_t(c)];
    w[size_t(4 * c)] = uint8_t(ch.lo & 0xff), w[size_t(4 * c + 1)] = uint8_t(ch.lo >> 8);
    w[size_t(4 * c + 2)] = uint8_t(ch.hi & 0xff), w[size_t(4 * c + 3)] = uint8_t(ch.hi >> 8);
    for (size_t j = 0; j < ch.index.size(); ++j) put(bit_i, uint64_t(ch.index[j]), b), put(bit_c, uint64_t(ch.code[j]), 2);
  }
  return w;
}

std::vector<float> reference_decode(const std::vector<RefChunk>& chunks, int64_t n) {
  std::vector<float> out(size_t(n), 0.0f);
  for (size_t c = 0; c < chunks.size(); ++c) {
    const RefChunk& ch = chunks[c];
    const float lo = bits_float(uint32_t(ch.lo) << 16), hi = bits_float(uint32_t(ch.hi) << 16);
    for (size_t j = 0; j < ch.index.size(); ++j) {
      const float v = (ch.code[j] & 2) ? hi : lo;
      out[c * size_t(C) + size_t(ch.index[j])] = (ch.code[j] & 1) ? -v : v;
    }
  }
  return out;
}

void expect_matches_reference(const std::vector<float>& m, int64_t rows, int64_t cols, double density) {
  SCOPED_TRACE(testing::Message() << rows << "x" << cols << " density " << density);
  auto codec = make_compressor({CompressionMethod::Topk2, 16, 0.1, false, 0, density}, rows, cols, 1, 2);
  std::vector<float> wire(size_t(codec->wire_floats()), 7.0f), out(m.size(), 7.0f);
  codec->encode(m.data(), wire.data());
  codec->decode(wire.data(), out.data());
  const auto ref = reference_encode(m, density);
  const auto ref_wire = reference_wire(ref, rows * cols);
  ASSERT_EQ(ref_wire.size(), wire.size() * 4);
  EXPECT_EQ(std::memcmp(ref_wire.data(), wire.data(), ref_wire.size()), 0);
  const auto ref_out = reference_decode(ref, rows * cols);
  EXPECT_EQ(std::memcmp(ref_out.data(), out.data(), out.size() * 4), 0);
}

TEST(Topk2, EncodeAndDecodeMatchTheDefinition) {
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 5}, {64, 64}, {96, 100}, {300, 41}})
    for (double density : {0.01, 0.02, 0.05, 0.25}) {
      auto m = gaussian(size_t(rows * cols), uint32_t(rows * 7 + cols));
      m[0] = 40.0f;  // an outlier
      expect_matches_reference(m, rows, cols, density);
    }
}

TEST(Topk2, WireBytesCountTheIndices) {
  // Two full chunks and one of 100: k = 82, 82, 2; K = 166; 12-bit indices.
  EXPECT_EQ(Topk2Compressor::selected(2 * C + 100, 0.02), 166);
  EXPECT_EQ(Topk2Compressor::index_bits(2 * C + 100), 12);
  EXPECT_EQ(Topk2Compressor::wire_bytes(1, 2 * C + 100, 0.02), 3 * 4 + (166 * 12 + 7) / 8 + (2 * 166 + 7) / 8);
  EXPECT_EQ(Topk2Compressor::wire_bytes(1, 2 * C + 100, 0.02), 12 + 249 + 42);
  // 15 values: one chunk, k = round(3.75) = 4, indices of 4 bits: 4 + 2 + 1 bytes, padded to 2 words.
  EXPECT_EQ(Topk2Compressor::wire_bytes(3, 5, 0.25), 7);
  EXPECT_EQ(make_compressor({CompressionMethod::Topk2, 16, 0.1, false, 0, 0.25}, 3, 5, 1, 2)->wire_floats(), 2);
  // One value: one index bit, one code.
  EXPECT_EQ(Topk2Compressor::wire_bytes(1, 1, 0.01), 4 + 1 + 1);
  // Four full chunks at 2 %: 147.5 bytes per 4096 values (0.288 bits per value), 4 + 123 + 20.5.
  EXPECT_EQ(Topk2Compressor::wire_bytes(64, 64 * 4, 0.02), 4 * 4 + 4 * 123 + 4 * 82 * 2 / 8);
  EXPECT_EQ(compressed_wire_floats({CompressionMethod::Topk2, 16, 0.1, false, 0, 0.02}, 64, 256), 148);
}

TEST(Topk2, TiesGoToTheLowerIndex) {
  // Equal magnitudes, alternating signs: the first k indices are sent, the first k/2 of them high.
  std::vector<float> m(200);
  for (size_t i = 0; i < m.size(); ++i) m[i] = (i % 2) ? -0.5f : 0.5f;
  auto codec = make_compressor({CompressionMethod::Topk2, 16, 0.1, false, 0, 0.05}, 10, 20, 1, 2);  // k = 10
  std::vector<float> wire(size_t(codec->wire_floats())), out(m.size());
  codec->encode(m.data(), wire.data());
  codec->decode(wire.data(), out.data());
  for (size_t i = 0; i < m.size(); ++i) EXPECT_EQ(out[i], i < 10 ? m[i] : 0.0f) << i;  // both means are 0.5
  expect_matches_reference(m, 10, 20, 0.05);
}

TEST(Topk2, HandWorkedChunk) {
  // k = round(0.25 * 8) = 2: |-4| and |3| are sent; high = the larger (-4), low = 3.
  const std::vector<float> m{0.5f, -4.0f, 1.0f, 3.0f, -0.0f, 2.0f, -1.0f, 0.25f};
  auto codec = make_compressor({CompressionMethod::Topk2, 16, 0.1, false, 0, 0.25}, 1, 8, 1, 2);
  std::vector<float> wire(size_t(codec->wire_floats())), out(8);
  codec->encode(m.data(), wire.data());
  const auto* w = reinterpret_cast<const uint8_t*>(wire.data());
  // lo = bf16(3) = 0x4040, hi = bf16(4) = 0x4080; indices 1, 3 (3 bits each); codes 0b11, 0b00.
  EXPECT_EQ(w[0], 0x40); EXPECT_EQ(w[1], 0x40); EXPECT_EQ(w[2], 0x80); EXPECT_EQ(w[3], 0x40);
  EXPECT_EQ(w[4], 1 | (3 << 3));  // index bits: 001 then 011
  EXPECT_EQ(w[5], 0x03);          // codes: 11 then 00
  EXPECT_EQ(Topk2Compressor::wire_bytes(1, 8, 0.25), 6);
  codec->decode(wire.data(), out.data());
  EXPECT_EQ(out, (std::vector<float>{0, -4, 0, 3, 0, 0, 0, 0}));
}

TEST(Topk2, NonFiniteChunkDecodesToNaN) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    auto m = gaussian(size_t(2 * C), 5);
    m[size_t(C + 17)] = bad;
    auto codec = make_compressor({CompressionMethod::Topk2, 16, 0.1, false, 0, 0.02}, 2, C, 1, 2);
    std::vector<float> wire(size_t(codec->wire_floats())), out(m.size());
    codec->encode(m.data(), wire.data());
    codec->decode(wire.data(), out.data());
    EXPECT_TRUE(std::isnan(out[size_t(C + 17)]));
    for (int64_t i = 0; i < C; ++i) EXPECT_TRUE(std::isfinite(out[size_t(i)]));  // the other chunk is untouched
    expect_matches_reference(m, 2, C, 0.02);
  }
}

TEST(Topk2, ErrorFeedbackKeepsWhatWasNotSent) {
  auto m = gaussian(size_t(3 * C), 11);
  ErrorFeedback ef(make_compressor({CompressionMethod::Topk2, 16, 0.1, false, 0, 0.02}, 3, C, 1, 2));
  EXPECT_TRUE(ef.stateful());
  std::vector<float> wire(size_t(ef.wire_floats())), out(m.size());
  ef.encode(m.data(), wire.data());
  ef.decode(wire.data(), out.data());
  const auto r = ef.residual().to_host();
  int64_t sent = 0;
  for (size_t i = 0; i < m.size(); ++i) {
    EXPECT_EQ(r[i], m[i] - out[i]) << i;
    sent += out[i] != 0.0f;
  }
  EXPECT_EQ(sent, 3 * 82);
  // The next message carries the residual: a value never sent grows until it is.
  ef.encode(m.data(), wire.data());
  std::vector<float> corrected(m.size());
  for (size_t i = 0; i < m.size(); ++i) corrected[i] = m[i] + r[i];
  std::vector<float> plain(wire.size());
  make_compressor({CompressionMethod::Topk2, 16, 0.1, false, 0, 0.02}, 3, C, 1, 2)->encode(corrected.data(), plain.data());
  EXPECT_EQ(std::memcmp(plain.data(), wire.data(), wire.size() * 4), 0);
}

TEST(Topk2, RefusesADensityOutsideItsRange) {
  for (double d : {0.0, -0.1, 0.26, 1.0})
    EXPECT_THROW(make_compressor({CompressionMethod::Topk2, 16, 0.1, false, 0, d}, 4, 4, 1, 2), Error) << d;
  EXPECT_EQ(describe({CompressionMethod::Topk2, 16, 0.1, false, 0, 0.02}), "topk2 2%");
}

}  // namespace
}  // namespace occ
