// The adaptive codec (compress/adaptive_codec.h: int4 on the most energetic
// 64-value tiles, lloydmax2 on the rest, its bit map on the wire):
//   * a hand-made message whose allocation is known (an outlier tile, a tie
//     broken by the index, a zero tile), its bit map byte and its exact bytes;
//   * encode/decode against a reference twin written here from the rule and
//     the codes' definitions (a full sort of the tiles; int4 and the Lloyd-Max
//     levels from their definitions), padded tiles included;
//   * non-finite tiles, stochastic rounding's keying, the rANS stage's
//     losslessness on its wire, the rotation around it, the flag's values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "compress/adaptive_codec.h"
#include "compress/compressor_factory.h"
#include "compress/entropy_coder.h"
#include "core/error.h"

#include "compressor_test_util.h"

namespace occ {
namespace {

using test::gaussian;

std::vector<uint8_t> wire_bytes_of(const std::vector<float>& wire) {
  std::vector<uint8_t> b(wire.size() * 4);
  std::memcpy(b.data(), wire.data(), b.size());
  return b;
}

// 2 rows x 256 columns: 8 tiles of 64. Energies (sum of squares):
//   t0 64 (all 1), t1 576 (all 3), t2 1600 (all 5), t3 2500 (one 50, the rest 0),
//   t4 1600 (all -5: ties t2), t5 256 (all 2), t6 0, t7 1024 (all 4).
// The rank: t3, t2, t4 (the tie to the lower index), t7, t1, t5, t0, t6.
std::vector<float> hand_made() {
  const float value[8] = {1, 3, 5, 0, -5, 2, 0, 4};
  std::vector<float> m(2 * 256);
  for (int t = 0; t < 8; ++t)
    for (int j = 0; j < 64; ++j) m[size_t(t * 64 + j)] = value[t];
  m[size_t(3 * 64 + 17)] = 50.0f;
  return m;
}

TEST(AdaptiveCodec, HandMadeMessageAllocatesTheKnownTiles) {
  const std::vector<float> m = hand_made();
  auto high_set = [&](double f) {
    const std::vector<uint8_t> high = adaptive::allocate(m.data(), 2, 256, f);
    std::vector<int> set;
    for (int t = 0; t < 8; ++t)
      if (high[size_t(t)]) set.push_back(t);
    return set;
  };
  EXPECT_EQ(high_set(0.0), std::vector<int>{});
  EXPECT_EQ(high_set(0.125), (std::vector<int>{3}));           // H = 1: the outlier tile
  EXPECT_EQ(high_set(0.25), (std::vector<int>{2, 3}));         // H = 2: t2 wins its tie with t4
  EXPECT_EQ(high_set(0.3), (std::vector<int>{2, 3}));          // 2.4 + 0.5 -> 2
  EXPECT_EQ(high_set(0.3125), (std::vector<int>{2, 3, 4}));    // 2.5 + 0.5 -> 3
  EXPECT_EQ(high_set(0.5), (std::vector<int>{2, 3, 4, 7}));
  EXPECT_EQ(high_set(1.0), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));

  // The wire at F = 0.5: map 1 byte (bits 2, 3, 4, 7 = 0x9c), 8 bf16 scales,
  // 4 x 32 bytes of int4 codes, 4 x 16 of lloydmax2 codes: 1 + 16 + 128 + 64 = 209
  // bytes = 1 + 18 T + 16 H, padded to 53 words.
  EXPECT_EQ(adaptive::wire_bytes(2, 256, 0.5), 209);
  AdaptiveCompressor c(2, 256, 0.5, false, 1, 2);
  ASSERT_EQ(c.wire_floats(), 53);
  EXPECT_EQ(compressed_wire_floats({.method = CompressionMethod::Adaptive, .high_fraction = 0.5}, 2, 256), 53);
  std::vector<float> wire(53, 7.0f), out(m.size());
  c.encode(m.data(), wire.data());
  const std::vector<uint8_t> b = wire_bytes_of(wire);
  EXPECT_EQ(b[0], 0x9c);
  for (int k = 209; k < 212; ++k) EXPECT_EQ(b[size_t(k)], 0) << "padding byte " << k;
  // Scales: t3 (high, int4) max 50 / 7 = 7.142857 up to bf16 = 7.15625 (0x40e5);
  // t0 (low, lloydmax2) RMS 1 = bf16 0x3f80.
  EXPECT_EQ(b[1 + 2 * 3] | (b[2 + 2 * 3] << 8), 0x40e5);
  EXPECT_EQ(b[1 + 2 * 0] | (b[2 + 2 * 0] << 8), 0x3f80);
  c.decode(wire.data(), out.data());
  // High tiles: t2 all 5 -> scale bf16_up(5 / 7) -> code 7 -> 7 s; t3's outlier 7 * 7.15625.
  EXPECT_FLOAT_EQ(out[size_t(3 * 64 + 17)], 7.0f * 7.15625f);
  EXPECT_EQ(out[size_t(3 * 64 + 16)], 0.0f);
  // Low tiles: a constant tile of RMS r decodes to the outer level 1.5104176 r.
  EXPECT_FLOAT_EQ(out[0], 1.5104176f);
  EXPECT_FLOAT_EQ(out[size_t(5 * 64)], 2.0f * 1.5104176f);
  EXPECT_EQ(out[size_t(6 * 64)], 1.5104176f * 0.0f);  // RMS 0: scale 0, zeros
}

// ---- the reference twin, from the definitions ---------------------------------------

float bf16_up(float a) {  // the smallest bf16 value >= a (a >= 0 finite)
  uint32_t u;
  std::memcpy(&u, &a, 4);
  uint32_t t = u & 0xffff0000u;
  float r;
  std::memcpy(&r, &t, 4);
  if (double(r) < double(a)) {
    t += 0x10000u;
    std::memcpy(&r, &t, 4);
  }
  return r;
}

std::vector<float> reference(const std::vector<float>& m, int64_t rows, int64_t cols, double f,
                             std::vector<int>* high_out) {
  const int64_t nb = (cols + 63) / 64, T = rows * nb;
  const int64_t H = int64_t(std::floor(f * double(T) + 0.5));
  std::vector<std::pair<double, int64_t>> by_energy;  // (-energy, index): ascending = the rule's rank
  for (int64_t t = 0; t < T; ++t) {
    const int64_t i = t / nb, b = t % nb, len = std::min<int64_t>(64, cols - 64 * b);
    double e = 0;
    for (int64_t j = 0; j < len; ++j) e += double(m[size_t(i * cols + 64 * b + j)]) * m[size_t(i * cols + 64 * b + j)];
    by_energy.push_back({-e, t});
  }
  std::sort(by_energy.begin(), by_energy.end());
  std::vector<int> high(size_t(T), 0);
  for (int64_t k = 0; k < H; ++k) high[size_t(by_energy[size_t(k)].second)] = 1;
  const double lm2[4] = {-1.510417608499096, -0.45278003463649213, 0.45278003463649213, 1.510417608499096};
  std::vector<float> out(m.size());
  for (int64_t t = 0; t < T; ++t) {
    const int64_t i = t / nb, b = t % nb, len = std::min<int64_t>(64, cols - 64 * b);
    const float* x = m.data() + i * cols + 64 * b;
    float* y = out.data() + i * cols + 64 * b;
    if (high[size_t(t)]) {  // int4: round(x / s) in [-7, 7], s = max |x| / 7 (fp32) up to bf16
      float amax = 0;
      for (int64_t j = 0; j < len; ++j) amax = std::max(amax, std::fabs(x[j]));
      const float s = bf16_up(amax / 7.0f);
      for (int64_t j = 0; j < len; ++j) {
        const double q = s > 0 ? std::clamp(std::nearbyint(double(x[j] / s)), -7.0, 7.0) : 0.0;
        y[j] = float(q) * s;
      }
    } else {  // lloydmax2: the nearest level times s = the RMS up to bf16 (a tie: the upper level)
      double sum = 0;
      for (int64_t j = 0; j < len; ++j) sum += double(x[j]) * x[j];
      const float s = bf16_up(float(std::sqrt(sum / double(len))));
      for (int64_t j = 0; j < len; ++j) {
        int best = 0;
        if (s > 0) {
          const double v = double(x[j] / s);
          for (int k = 1; k < 4; ++k)
            if (std::fabs(v - lm2[k]) <= std::fabs(v - lm2[best])) best = k;
          y[j] = float(lm2[best]) * s;
        } else {
          y[j] = 0.0f;
        }
      }
    }
  }
  if (high_out) *high_out = high;
  return out;
}

TEST(AdaptiveCodec, MatchesItsReferenceTwin) {
  const std::pair<int64_t, int64_t> shapes[] = {{3, 200}, {4, 64}, {1, 1}, {5, 130}, {16, 256}};
  for (auto [rows, cols] : shapes)
    for (double f : {0.0, 0.125, 0.3, 1.0}) {
      std::vector<float> m = gaussian(size_t(rows * cols), uint64_t(rows * 1000 + cols));
      // Some loud tiles: energy that a few tiles hold.
      for (int64_t i = 0; i < rows; i += 2) m[size_t(i * cols)] *= 20.0f;
      std::vector<int> high;
      const std::vector<float> want = reference(m, rows, cols, f, &high);
      AdaptiveCompressor c(rows, cols, f, false, 3, 4);
      const int64_t T = rows * ((cols + 63) / 64), H = int64_t(std::floor(f * double(T) + 0.5));
      EXPECT_EQ(adaptive::wire_bytes(rows, cols, f), (T + 7) / 8 + 18 * T + 16 * H);
      std::vector<float> wire(size_t(c.wire_floats())), out(m.size());
      c.encode(m.data(), wire.data());
      const std::vector<uint8_t> b = wire_bytes_of(wire);
      for (int64_t t = 0; t < T; ++t) EXPECT_EQ((b[size_t(t / 8)] >> (t % 8)) & 1, high[size_t(t)]) << "tile " << t;
      c.decode(wire.data(), out.data());
      for (size_t k = 0; k < m.size(); ++k)
        ASSERT_EQ(out[k], want[k]) << rows << "x" << cols << " F " << f << " entry " << k << " of " << m[k];
    }
}

TEST(AdaptiveCodec, SpendsItsBitsWhereTheErrorIs) {
  // On a message whose energy sits in a few tiles, 12.5 % of tiles at 4 bits
  // cut the error far below lloydmax2's everywhere, for 0.27 bits per value more.
  const int64_t rows = 32, cols = 256;
  std::vector<float> m = gaussian(size_t(rows * cols), 11);
  for (int64_t i = 0; i < rows; i += 4)
    for (int64_t j = 0; j < 64; ++j) m[size_t(i * cols + j)] *= 10.0f;
  auto error = [&](const CompressorSpec& spec) {
    auto c = make_compressor(spec, rows, cols, 1, 2);
    std::vector<float> wire(size_t(c->wire_floats())), out(m.size());
    c->encode(m.data(), wire.data());
    c->decode(wire.data(), out.data());
    double e = 0;
    for (size_t k = 0; k < m.size(); ++k) e += (double(out[k]) - m[k]) * (double(out[k]) - m[k]);
    return e;
  };
  const double lm2 = error({CompressionMethod::LloydMax2}), ad = error({CompressionMethod::Adaptive});
  EXPECT_LT(ad, 0.3 * lm2) << "adaptive " << ad << " lloydmax2 " << lm2;
}

TEST(AdaptiveCodec, NonFiniteTileGoesHighAndDecodesToNaN) {
  std::vector<float> m = gaussian(4 * 128, 5);
  m[size_t(2 * 128 + 70)] = std::nanf("");  // tile 5 (row 2, tile 1)
  m[size_t(0)] = 1e3f;                       // tile 0 is loud, but finite
  const std::vector<uint8_t> high = adaptive::allocate(m.data(), 4, 128, 0.125);  // H = 1
  for (int t = 0; t < 8; ++t) EXPECT_EQ(high[size_t(t)], t == 5 ? 1 : 0) << t;
  AdaptiveCompressor c(4, 128, 0.125, false, 1, 2);
  std::vector<float> wire(size_t(c.wire_floats())), out(m.size());
  c.encode(m.data(), wire.data());
  c.decode(wire.data(), out.data());
  for (int64_t j = 0; j < 64; ++j) EXPECT_TRUE(std::isnan(out[size_t(2 * 128 + 64 + j)])) << j;
  for (int64_t j = 0; j < 64; ++j) EXPECT_TRUE(std::isfinite(out[size_t(2 * 128 + j)])) << j;
}

TEST(AdaptiveCodec, StochasticRoundingIsKeyedByTheMessageAndUnbiased) {
  const int64_t rows = 4, cols = 128;
  const std::vector<float> m = gaussian(size_t(rows * cols), 9);
  AdaptiveCompressor c(rows, cols, 0.25, true, 1, 2);
  std::vector<float> a(size_t(c.wire_floats())), b(a.size()), out(m.size());
  std::vector<double> mean(m.size(), 0.0);
  c.set_message_key(1);
  c.encode(m.data(), a.data());
  c.encode(m.data(), b.data());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "the same message, the same bits";
  c.set_message_key(2);
  c.encode(m.data(), b.data());
  EXPECT_NE(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "another message, other bits";
  const int n = 400;
  for (int k = 0; k < n; ++k) {
    c.set_message_key(uint64_t(100 + k));
    c.encode(m.data(), a.data());
    c.decode(a.data(), out.data());
    for (size_t j = 0; j < m.size(); ++j) mean[j] += out[j] / n;
  }
  // Unbiased inside the levels' range (lloydmax2 saturates beyond 1.51 times its
  // tile's RMS, about 1.37 here): the mean of 400 draws is close on |x| < 1.2.
  double bias = 0, energy = 0;
  for (size_t j = 0; j < m.size(); ++j)
    if (std::fabs(m[j]) < 1.2f) bias += (mean[j] - m[j]) * (mean[j] - m[j]), energy += double(m[j]) * m[j];
  EXPECT_LT(bias, 0.01 * energy);
}

TEST(AdaptiveCodec, RansStageGivesBackItsWire) {
  for (double f : {0.0, 0.125, 1.0}) {
    const int64_t rows = 64, cols = 200;
    const std::vector<float> m = gaussian(size_t(rows * cols), 21);
    AdaptiveCompressor c(rows, cols, f, false, 1, 2);
    std::vector<float> wire(size_t(c.wire_floats()));
    c.encode(m.data(), wire.data());
    BlockWireCoder coder = BlockWireCoder::adaptive(rows, cols, f);
    ASSERT_EQ(coder.raw_bytes(), adaptive::wire_bytes(rows, cols, f));
    std::vector<uint8_t> coded(size_t(coder.capacity_bytes())), back(size_t(coder.raw_bytes()));
    const int64_t bytes = coder.encode(reinterpret_cast<const uint8_t*>(wire.data()), coded.data());
    EXPECT_LE(bytes, coder.raw_bytes() + 4) << "F " << f;
    if (f == 1.0) {
      EXPECT_LT(bytes, coder.raw_bytes()) << "int4's codes of a Gaussian carry < 4 bits";
    }
    coder.decode(coded.data(), bytes, back.data());
    EXPECT_EQ(std::memcmp(back.data(), wire.data(), back.size()), 0) << "F " << f;
  }
}

TEST(AdaptiveCodec, RotatedDecodesAlikeAndSendsTheSameBytes) {
  const int64_t rows = 8, cols = 256;
  const std::vector<float> m = gaussian(size_t(rows * cols), 31);
  const CompressorSpec spec{.method = CompressionMethod::Adaptive, .rotation = 128, .high_fraction = 0.125};
  auto sender = make_compressor(spec, rows, cols, 7, 8), receiver = make_compressor(spec, rows, cols, 7, 8);
  EXPECT_EQ(sender->wire_floats(), compressed_wire_floats({CompressionMethod::Adaptive}, rows, cols));
  sender->set_message_key(42), receiver->set_message_key(42);
  std::vector<float> wire(size_t(sender->wire_floats())), a(m.size()), b(m.size());
  sender->encode(m.data(), wire.data());
  sender->decode(wire.data(), a.data());
  receiver->decode(wire.data(), b.data());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
  double e = 0, n = 0;
  for (size_t k = 0; k < m.size(); ++k) e += (double(a[k]) - m[k]) * (double(a[k]) - m[k]), n += double(m[k]) * m[k];
  EXPECT_LT(e, 0.15 * n);  // lloydmax2's 0.117 of a Gaussian's energy, less on the 4-bit tiles
  EXPECT_EQ(describe(spec), "adaptive 12.5% high rotated 128");
}

TEST(AdaptiveCodec, HighFractionFlag) {
  EXPECT_EQ(parse_high_fraction("0.25", "--x"), 0.25);
  EXPECT_EQ(parse_high_fraction("0", "--x"), 0.0);
  EXPECT_EQ(parse_high_fraction("1", "--x"), 1.0);
  for (const char* bad : {"", "-0.1", "1.5", "abc", "0.2x", "nan", "inf"}) {
    try {
      parse_high_fraction(bad, "--activation-comp-adaptive-high-fraction");
      FAIL() << "no throw for '" << bad << "'";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--activation-comp-adaptive-high-fraction"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace occ
