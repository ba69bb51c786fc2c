// Block-scaled 3/4-bit compressors (compress/block_compressor.h, kernels/block_codes.h)
// against a reference written here from the specifications, not from the code:
//   * the E2M1 value table (OCP MX v1.0 5.3.3: +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}),
//     rounding by a search over the table for the nearest value (ties to the
//     even code), saturating at 6;
//   * MXFP4's E8M0 scale by the spec's rule (6.3): floor(log2(max|x|)) - 2 in
//     double arithmetic, clamped to [-127, 127];
//   * NVFP4's E4M3 block scale: the nearest of the 127 finite non-negative E4M3
//     values enumerated from their definition (bias 7, 3 mantissa bits), and
//     the fp32 row scale max|row| / (6 * 448);
//   * int4 / int3: round(x / s) with s the smallest bf16 >= max|x| / 7 (or 3),
//     found from the fraction and exponent of a double;
// every scale and code read back from the wire at the documented offsets.
// Also: hand-worked blocks (constants derived by hand), the byte formulas for
// row lengths blocks do not divide, round-trip error bounds, stochastic
// rounding (unbiased, between the two neighbours, deterministic, seeded),
// E2M1's 0x8 as -0, non-finite blocks as the formats' NaN scales (the whole
// block NaN, OCP MX v1.0 5.2), and
// error feedback resuming bit-exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "compress/block_compressor.h"
#include "compress/error_feedback.h"
#include "compress/compressed_activations.h"
#include "compress/compressed_backprop.h"
#include "compress/compressor_factory.h"
#include "compress/powersgd.h"
#include "core/error.h"
#include "core/tensor_file.h"
#include "temp_dir.h"

#include "compressor_test_util.h"

namespace occ {
namespace {
using kernels::BlockCode;
using namespace occ::test;

// ---- the reference ------------------------------------------------------------

const double kE2m1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};

// The E2M1 code (sign bit 3) of v: nearest table value, ties to the even code; beyond 6: 6.
uint32_t ref_e2m1(double v) {
  const double a = std::fabs(v);
  uint32_t best = 0;
  for (uint32_t k = 1; k < 8; ++k) {
    const double d = std::fabs(a - kE2m1[k]), db = std::fabs(a - kE2m1[best]);
    if (d < db || (d == db && k % 2 == 0)) best = k;
  }
  return best | (v < 0 ? 8u : 0u);  // the sign kept: a negative value that rounds to zero is -0 (0x8)
}
double ref_e2m1_value(uint32_t c) { return (c & 8 ? -1 : 1) * kE2m1[c & 7]; }

int ref_mx_exponent(double amax) {
  if (amax == 0) return -127;
  const int e = int(std::floor(std::log2(amax))) - 2;
  return std::max(-127, std::min(127, e));
}

// E4M3 value of a code 0..0x7e (non-negative, finite).
double e4m3_value(uint32_t c) {
  const int e = int(c >> 3), m = int(c & 7);
  return e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1 + m / 8.0, e - 7);
}
uint32_t ref_e4m3(double v) {  // v >= 0; nearest, ties to the even code; saturating
  uint32_t best = 0;
  for (uint32_t c = 1; c <= 0x7e; ++c) {
    const double d = std::fabs(v - e4m3_value(c)), db = std::fabs(v - e4m3_value(best));
    if (d < db || (d == db && c % 2 == 0)) best = c;
  }
  return best;
}

// The smallest bf16 value >= v > 0: 8 significant bits, or below 2^-126 a
// multiple of 2^-133 (bf16's subnormals: 7 fraction bits).
double ref_bf16_up(double v) {
  if (v < std::ldexp(1.0, -126)) return std::ldexp(std::ceil(std::ldexp(v, 133)), -133);
  int e;
  const double f = std::frexp(v, &e);  // v = f 2^e, f in [0.5, 1)
  return std::ldexp(std::ceil(f * 256) / 256, e);
}

struct RefBlock {
  std::vector<uint32_t> codes;
  uint32_t scale_code = 0;  // E8M0 byte, E4M3 byte or bf16 bits
  double scale = 0;         // what the entries are divided by
};

RefBlock ref_block(BlockCode code, const float* x, int len, double row_scale) {
  RefBlock b;
  double amax = 0;
  for (int j = 0; j < len; ++j) amax = std::max(amax, std::fabs(double(x[j])));
  if (code == BlockCode::Mxfp4) {
    const int e = ref_mx_exponent(amax);
    b.scale_code = uint32_t(e + 127), b.scale = std::ldexp(1.0, e);
  } else if (code == BlockCode::Nvfp4) {
    b.scale_code = row_scale > 0 ? ref_e4m3(amax / (6 * row_scale)) : 0;
    b.scale = e4m3_value(b.scale_code) * row_scale;
  } else {
    const double top = code == BlockCode::Int4 ? 7 : 3;
    b.scale = amax > 0 ? ref_bf16_up(float(amax) / float(top)) : 0;  // max / top in fp32, then up to bf16
    b.scale_code = uint32_t(float_bits(float(b.scale)) >> 16);
  }
  for (int j = 0; j < len; ++j) {
    if (b.scale == 0) {
      b.codes.push_back(0);
      continue;
    }
    const double v = double(x[j]) / b.scale;
    if (code == BlockCode::Mxfp4 || code == BlockCode::Nvfp4) {
      b.codes.push_back(ref_e2m1(v));
    } else {
      const int bits = code == BlockCode::Int4 ? 4 : 3, top = (1 << (bits - 1)) - 1;
      const double q = std::max(-double(top), std::min(double(top), std::nearbyint(v)));  // FE_TONEAREST: ties even
      b.codes.push_back(uint32_t(int(q)) & ((1u << bits) - 1));
    }
  }
  return b;
}
double ref_value(BlockCode code, uint32_t c, double scale) {
  if (code == BlockCode::Mxfp4 || code == BlockCode::Nvfp4) return ref_e2m1_value(c) * scale;
  const int bits = code == BlockCode::Int4 ? 4 : 3;
  const int q = int(c) >= (1 << (bits - 1)) ? int(c) - (1 << bits) : int(c);
  return q * scale;
}

// ---- reading the wire as documented ----------------------------------------------

struct Format {
  BlockCode code;
  CompressionMethod method;
  int B, bits, scale_bytes, row_bytes, block_bytes;  // block_bytes: scale + codes
};
const Format kFormats[] = {
    {BlockCode::Mxfp4, CompressionMethod::Mxfp4, 32, 4, 1, 0, 17},
    {BlockCode::Nvfp4, CompressionMethod::Nvfp4, 16, 4, 1, 4, 9},
    {BlockCode::Int4, CompressionMethod::Int4, 32, 4, 2, 0, 18},
    {BlockCode::Int3, CompressionMethod::Int3, 32, 3, 2, 0, 14},
};
const char* name_of(const Format& f) { return method_name(f.method); }

struct WireView {
  const Format& f;
  const unsigned char* bytes;
  int64_t n, c, nb;
  WireView(const Format& f, const std::vector<float>& wire, int64_t n, int64_t c)
      : f(f), bytes(reinterpret_cast<const unsigned char*>(wire.data())), n(n), c(c), nb((c + f.B - 1) / f.B) {}
  WireView(const Format&, std::vector<float>&&, int64_t, int64_t) = delete;  // it would point into a temporary
  float row_scale(int64_t i) const {
    float r;
    std::memcpy(&r, bytes + 4 * i, 4);
    return r;
  }
  uint32_t scale_code(int64_t i, int64_t b) const {
    const unsigned char* s = bytes + f.row_bytes * n + (i * nb + b) * f.scale_bytes;
    return f.scale_bytes == 1 ? s[0] : uint32_t(s[0]) | uint32_t(s[1]) << 8;
  }
  uint32_t code(int64_t i, int64_t b, int j) const {
    const unsigned char* codes =
        bytes + f.row_bytes * n + n * nb * f.scale_bytes + (i * nb + b) * (f.B * f.bits / 8);
    uint64_t bitstring = 0;  // the block's bits (at most 128: read the needed bytes)
    const int bit = j * f.bits;
    for (int k = 0; k < 2 && bit / 8 + k < f.B * f.bits / 8; ++k) bitstring |= uint64_t(codes[bit / 8 + k]) << (8 * k);
    return uint32_t(bitstring >> (bit % 8)) & ((1u << f.bits) - 1);
  }
};

std::vector<float> encode(MatrixCompressor& q, const std::vector<float>& x) {
  std::vector<float> wire(size_t(q.wire_floats()));
  q.encode(x.data(), wire.data());
  return wire;
}

// ---- tests ------------------------------------------------------------------------------

TEST(BlockCompressor, ByteFormulasIncludeScalesAndPadding) {
  for (const Format& f : kFormats)
    for (int64_t r : {1, 3, 8})
      for (int64_t c : {1, 15, 16, 17, 31, 32, 33, 64, 100, 256}) {
        const int64_t nb = (c + f.B - 1) / f.B;
        const int64_t bytes = f.row_bytes * r + f.block_bytes * r * nb;
        BlockCompressor q(r, c, f.code, false, 1, 2);
        EXPECT_EQ(BlockCompressor::wire_bytes(f.code, r, c), bytes) << name_of(f) << " " << r << "x" << c;
        EXPECT_EQ(q.wire_floats(), (bytes + 3) / 4) << name_of(f) << " " << r << "x" << c;
        EXPECT_EQ(compressed_wire_floats({f.method}, r, c), q.wire_floats()) << name_of(f);
      }
  // The bits per value of a long row: 4.25, 4.5 (+ 32 per row), 4.5, 3.5.
  EXPECT_EQ(BlockCompressor::wire_bytes(BlockCode::Mxfp4, 1, 1024) * 8, 1024 * 17 / 4);
  EXPECT_EQ(BlockCompressor::wire_bytes(BlockCode::Nvfp4, 1, 1024) * 8, 1024 * 9 / 2 + 32);
  EXPECT_EQ(BlockCompressor::wire_bytes(BlockCode::Int4, 1, 1024) * 8, 1024 * 9 / 2);
  EXPECT_EQ(BlockCompressor::wire_bytes(BlockCode::Int3, 1, 1024) * 8, 1024 * 7 / 2);
}

TEST(BlockCompressor, EqualsTheSpecReferenceOnEveryScaleAndCode) {
  // Rows of several magnitudes (the scales' whole range in use), a zero row,
  // a subnormal row, lengths blocks do not divide, and outliers.
  for (const Format& f : kFormats)
    for (int64_t c : {7, 32, 50, 97}) {
      const int64_t r = 10;
      auto x = gaussian(size_t(r * c), uint32_t(c));
      for (int64_t i = 0; i < r; ++i)
        for (int64_t j = 0; j < c; ++j) x[size_t(i * c + j)] *= std::pow(10.0f, float(int(i) - 5) * 3.0f);
      for (int64_t j = 0; j < c; ++j) x[size_t(2 * c + j)] = 0.0f;
      for (int64_t j = 0; j < c; ++j) x[size_t(3 * c + j)] = float(j % 5) * 1e-42f;  // subnormal
      x[size_t(6 * c + c / 2)] = 1e4f;                                                // an outlier
      BlockCompressor q(r, c, f.code, false, 1, 2);
      const auto wire = encode(q, x);
      std::vector<float> out(x.size());
      q.decode(wire.data(), out.data());
      WireView w(f, wire, r, c);
      for (int64_t i = 0; i < r; ++i) {
        const float* row = x.data() + i * c;
        double row_scale = 0;
        if (f.code == BlockCode::Nvfp4) {
          double amax = 0;
          for (int64_t j = 0; j < c; ++j) amax = std::max(amax, std::fabs(double(row[j])));
          row_scale = w.row_scale(i);
          EXPECT_EQ(row_scale, double(float(amax) / 2688.0f)) << "row " << i;
        }
        for (int64_t b = 0; b < w.nb; ++b) {
          const int len = int(std::min<int64_t>(f.B, c - b * f.B));
          const RefBlock ref = ref_block(f.code, row + b * f.B, len, row_scale);
          ASSERT_EQ(w.scale_code(i, b), ref.scale_code) << name_of(f) << " row " << i << " block " << b;
          for (int j = 0; j < f.B; ++j) {
            const uint32_t got = w.code(i, b, j);
            if (j >= len) {
              EXPECT_EQ(got, 0u) << name_of(f) << ": padding sends the code of 0";
              continue;
            }
            ASSERT_EQ(got, ref.codes[size_t(j)]) << name_of(f) << " " << c << " cols, row " << i << " block " << b
                                                  << " entry " << j << " x " << row[b * f.B + j];
            EXPECT_EQ(double(out[size_t(i * c + b * f.B + j)]), double(float(ref_value(f.code, got, ref.scale))))
                << name_of(f) << " decoded";
          }
        }
      }
    }
}

TEST(BlockCompressor, HandWorkedBlocks) {
  auto wire_of = [](BlockCode code, std::vector<float> x) {
    BlockCompressor q(1, int64_t(x.size()), code, false, 1, 2);
    std::vector<float> wire(size_t(q.wire_floats()));
    q.encode(x.data(), wire.data());
    std::vector<unsigned char> bytes(size_t(BlockCompressor::wire_bytes(code, 1, int64_t(x.size()))));
    std::memcpy(bytes.data(), wire.data(), bytes.size());
    return bytes;
  };
  // MXFP4, max 5.9: floor(log2 5.9) = 2, e = 0, X = 1 (E8M0 127). 1.0 -> code 2;
  // -0.3 -> 0.5 (0.2 away, 0 is 0.3 away): 0x9; 0.76 -> 1.0: 2; 5.9 -> 6: 7;
  // 2.5 -> the tie of 2 (code 4, even) and 3 (code 5): 4. Nibbles low first.
  auto mx = wire_of(BlockCode::Mxfp4, {1.0f, -0.3f, 0.76f, 5.9f, 2.5f});
  ASSERT_EQ(mx.size(), 17u);
  EXPECT_EQ(mx[0], 127);
  EXPECT_EQ(mx[1], 0x92);
  EXPECT_EQ(mx[2], 0x72);
  EXPECT_EQ(mx[3], 0x04);
  for (size_t k = 4; k < mx.size(); ++k) EXPECT_EQ(mx[k], 0) << "padding";
  // Max 100: floor(log2 100) = 6, e = 4, X = 16 (E8M0 131); 100 / 16 = 6.25 saturates at 6 (code 7);
  // 0.001 / 16 < 0.25: 0. Max 0.001: floor(log2) = -10, e = -12 (E8M0 115); 0.001 * 4096 = 4.096 -> 4 (code 6).
  auto mx2 = wire_of(BlockCode::Mxfp4, {100.0f, 0.001f});
  EXPECT_EQ(mx2[0], 131);
  EXPECT_EQ(mx2[1], 0x07);
  auto mx3 = wire_of(BlockCode::Mxfp4, {-0.001f});
  EXPECT_EQ(mx3[0], 115);
  EXPECT_EQ(mx3[1], 0x0e);
  // NVFP4, row max 2688: R = 1. Block 0 max 2688: S = E4M3(448) = 0x7e, 2688 / 448 = 6: code 7.
  // Block 1 max 3: S = E4M3(0.5) = 0x30 (exponent 6 = -1 + 7), 1.5 / 0.5 = 3: code 5; 3 / 0.5 = 6: 7.
  std::vector<float> nv(32, 0.0f);
  nv[0] = 2688.0f, nv[16] = 1.5f, nv[17] = -3.0f;
  auto nvb = wire_of(BlockCode::Nvfp4, nv);
  ASSERT_EQ(nvb.size(), 4u + 18u);
  float R;
  std::memcpy(&R, nvb.data(), 4);
  EXPECT_EQ(R, 1.0f);
  EXPECT_EQ(nvb[4], 0x7e);
  EXPECT_EQ(nvb[5], 0x30);
  EXPECT_EQ(nvb[6], 0x07);       // block 0, entries 0 and 1
  EXPECT_EQ(nvb[6 + 8], 0xf5);   // block 1: 1.5 -> 5, -3 -> 0x8 | 7
  // int4, max 7: s = 1 (bf16 0x3f80, little-endian); 7 -> 7; -3.5 -> -4 (tie to even): 0xc;
  // 0.5 -> 0 (tie to even); 1.5 -> 2.
  auto i4 = wire_of(BlockCode::Int4, {7.0f, -3.5f, 0.5f, 1.5f});
  ASSERT_EQ(i4.size(), 18u);
  EXPECT_EQ(i4[0], 0x80);
  EXPECT_EQ(i4[1], 0x3f);
  EXPECT_EQ(i4[2], 0xc7);
  EXPECT_EQ(i4[3], 0x20);
  // int4, max 1: 1 / 7 = 1.0010010|01..b x 2^-3; up to 8 significant bits: 1.0010011b x 2^-3
  // = 0.1435546875 (bf16 0x3e13); 1 / that = 6.97 -> 7.
  auto i4b = wire_of(BlockCode::Int4, {1.0f});
  EXPECT_EQ(i4b[0], 0x13);
  EXPECT_EQ(i4b[1], 0x3e);
  EXPECT_EQ(i4b[2], 0x07);
  // int3, max 3: s = 1; 3 -> 3 (011); -1.5 -> -2 (tie to even): 110; 2.5 -> 2: 010.
  // Bits 0-2, 3-5, 6-8: byte 0 = 011 | 110 << 3 | (010 << 6 & 0xff) = 0xb3, byte 1 = 010 >> 2 = 0.
  auto i3 = wire_of(BlockCode::Int3, {3.0f, -1.5f, 2.5f});
  ASSERT_EQ(i3.size(), 14u);
  EXPECT_EQ(i3[2], 0xb3);
  EXPECT_EQ(i3[3], 0x00);
}

TEST(BlockCompressor, RoundTripErrorBounds) {
  const int64_t r = 40, c = 200;
  const auto x = gaussian(size_t(r * c), 17);
  for (const Format& f : kFormats) {
    BlockCompressor q(r, c, f.code, false, 1, 2);
    const auto wire = encode(q, x);
    std::vector<float> out(x.size());
    q.decode(wire.data(), out.data());
    WireView w(f, wire, r, c);
    double err2 = 0, norm2 = 0;
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j) {
        const int64_t b = j / f.B;
        const size_t p = size_t(i * c + j);
        const double s = ref_block(f.code, x.data() + i * c + b * f.B, int(std::min<int64_t>(f.B, c - b * f.B)),
                                   f.code == BlockCode::Nvfp4 ? w.row_scale(i) : 0)
                             .scale;
        const double a = std::fabs(double(x[p])) / s, e = std::fabs(double(x[p]) - double(out[p]));
        double bound;
        if (f.code == BlockCode::Int4 || f.code == BlockCode::Int3) {
          bound = 0.5 * s;  // s >= max / top: no saturation
        } else {
          // Half the E2M1 step around |x| / s, or what saturation at 6 cuts off.
          bound = a > 6 ? (a - 6) * s : (a < 2 ? 0.25 : a < 4 ? 0.5 : 1.0) * s;
        }
        // Slack: x / s and the decoded product are each rounded once in fp32.
        EXPECT_LE(e, bound + std::fabs(double(x[p])) * std::ldexp(1.0, -22)) << name_of(f) << " (" << i << ", " << j << ") a " << a << " s " << s
                                                  << " x " << x[p] << " out " << out[p];
        err2 += e * e, norm2 += double(x[p]) * x[p];
      }
    // Relative RMS error of a Gaussian: ~0.1 for the 4-bit codes, ~0.23 for int3
    // (its step is max / 3: ~0.7 sigma in a block of 32, 0.2 sigma RMS).
    const double rel = std::sqrt(err2 / norm2);
    EXPECT_LT(rel, f.code == BlockCode::Int3 ? 0.25 : 0.12) << name_of(f);
    EXPECT_GT(rel, 0.01) << name_of(f);
  }
}

TEST(BlockCompressor, StochasticRoundingIsUnbiasedBetweenNeighbours) {
  // 4096 rows of the same values: each block draws its own bits (its position
  // is in the Philox counter), so the mean of the decoded rows approaches x,
  // while rounding to nearest keeps its bias.
  const int64_t r = 4096, c = 32;
  std::vector<float> row(c);
  for (int64_t j = 0; j < c; ++j) row[size_t(j)] = float(j) / 31.0f * 5.5f - 2.2f;
  row[0] = 6.0f;  // the block max: the scale is 1 for mxfp4
  std::vector<float> x(size_t(r * c));
  for (int64_t i = 0; i < r; ++i) std::copy(row.begin(), row.end(), x.begin() + i * c);
  for (const Format& f : kFormats) {
    BlockCompressor sr(r, c, f.code, true, 7, 3), rn(1, c, f.code, false, 7, 3);
    const auto wire = encode(sr, x);
    std::vector<float> out(x.size()), nearest(static_cast<size_t>(c));
    sr.decode(wire.data(), out.data());
    const auto wn = encode(rn, row);
    rn.decode(wn.data(), nearest.data());
    EXPECT_EQ(std::memcmp(wire.data(), encode(sr, x).data(), wire.size() * 4), 0) << name_of(f) << ": deterministic";
    BlockCompressor other_seed(r, c, f.code, true, 8, 3);
    EXPECT_NE(std::memcmp(wire.data(), encode(other_seed, x).data(), wire.size() * 4), 0) << name_of(f);
    WireView w(f, wire, r, c);
    double worst_sr = 0, worst_rn = 0;
    for (int64_t j = 0; j < c; ++j) {
      const int64_t b = j / f.B;
      const double s = ref_block(f.code, row.data() + b * f.B, f.B, f.code == BlockCode::Nvfp4 ? w.row_scale(0) : 0).scale;
      double mean = 0, lo = 1e30, hi = -1e30;
      for (int64_t i = 0; i < r; ++i) {
        const double v = out[size_t(i * c + j)];
        mean += v / double(r), lo = std::min(lo, v), hi = std::max(hi, v);
      }
      const double top = f.code == BlockCode::Int4 ? 7 : f.code == BlockCode::Int3 ? 3 : 6;
      if (std::fabs(row[size_t(j)]) / s > top) {
        // Beyond the largest code (nvfp4's block max when E4M3 rounded its scale down): saturated, always.
        EXPECT_EQ(lo, hi) << name_of(f) << " entry " << j;
        EXPECT_EQ(std::fabs(lo), float(top * s)) << name_of(f) << " entry " << j;
        continue;
      }
      // Only the two grid neighbours of x are drawn (a step <= 2 here).
      EXPECT_LE(hi - lo, 2.0 + 1e-9) << name_of(f) << " entry " << j;
      EXPECT_TRUE(lo <= row[size_t(j)] + 1e-6 && hi >= row[size_t(j)] - 1e-6) << name_of(f) << " entry " << j;
      worst_sr = std::max(worst_sr, std::fabs(mean - row[size_t(j)]));
      worst_rn = std::max(worst_rn, std::fabs(double(nearest[size_t(j)]) - row[size_t(j)]));
    }
    // The mean of 4096 draws of a step <= 2: standard error <= 1 / 64; 5 sigma.
    EXPECT_LT(worst_sr, 5.0 / 64.0) << name_of(f);
    EXPECT_GT(worst_rn, 0.1) << name_of(f) << ": (nearest rounding is biased on this row)";
  }
}

// The scale formats' NaN encodings: E8M0 0xFF (OCP MX v1.0 5.2), E4M3 0x7F, bf16 0x7FC0.
uint32_t nan_scale_code(BlockCode code) {
  return code == BlockCode::Mxfp4 ? 0xffu : code == BlockCode::Nvfp4 ? 0x7fu : 0x7fc0u;
}

TEST(BlockCompressor, NonFiniteBlocksSendTheScaleFormatsNanAndDecodeAllNan) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  for (const Format& f : kFormats)
    for (bool stochastic : {false, true}) {
      const int64_t c = 3 * f.B;
      std::vector<float> x = gaussian(size_t(c), 5);
      x[1] = nan, x[2] = inf, x[3] = -inf;                             // block 0: three non-finite among finite ones
      for (int j = f.B; j < 2 * f.B; ++j) x[size_t(j)] = j % 2 ? nan : inf;  // block 1: none finite
      x[size_t(2 * f.B + 1)] = inf;                                    // block 2: one infinity
      BlockCompressor q(1, c, f.code, stochastic, 1, 2);
      const auto wire = encode(q, x);
      std::vector<float> out(x.size());
      q.decode(wire.data(), out.data());
      WireView w(f, wire, 1, c);
      for (int64_t b = 0; b < 3; ++b) {
        EXPECT_EQ(w.scale_code(0, b), nan_scale_code(f.code)) << name_of(f) << " block " << b;
        for (int j = 0; j < f.B; ++j) {
          EXPECT_EQ(w.code(0, b, j), 0u) << name_of(f) << ": a NaN block sends zero codes";
          EXPECT_TRUE(std::isnan(out[size_t(b * f.B + j)])) << name_of(f) << " block " << b << " entry " << j;
        }
      }
      if (f.code == BlockCode::Nvfp4) EXPECT_TRUE(std::isfinite(w.row_scale(0))) << "R is of the finite entries";
    }
}

TEST(BlockCompressor, FiniteBlocksNeverSendANanScale) {
  // The largest finite magnitudes: E8M0 stops at 254 (2^127), E4M3 at 0x7e (448), bf16 below its NaNs.
  const float big = std::numeric_limits<float>::max();
  for (const Format& f : kFormats) {
    std::vector<float> x(size_t(f.B), 1.0f);
    x[0] = big, x[1] = -big;
    BlockCompressor q(1, f.B, f.code, false, 1, 2);
    const std::vector<float> wire = encode(q, x);  // WireView points into it: keep it alive
    WireView w(f, wire, 1, f.B);
    EXPECT_NE(w.scale_code(0, 0), nan_scale_code(f.code)) << name_of(f);
  }
}

// E2M1's 0x8 is -0 (OCP MX v1.0 5.3.3), as a standard MX decoder reads it: a
// negative value that rounds to zero sends it, and it decodes to -0, never NaN.
TEST(BlockCompressor, E2m1MinusZeroIsTheSpecs) {
  for (BlockCode code : {BlockCode::Mxfp4, BlockCode::Nvfp4}) {
    std::vector<float> x(16, 0.0f);
    x[0] = 4.0f, x[1] = -1e-3f, x[2] = 1e-3f;
    BlockCompressor q(1, 16, code, false, 1, 2);
    const auto wire = encode(q, x);
    std::vector<float> out(x.size());
    q.decode(wire.data(), out.data());
    WireView w(code == BlockCode::Mxfp4 ? kFormats[0] : kFormats[1], wire, 1, 16);
    EXPECT_EQ(w.code(0, 0, 1), 0x8u) << "-0.001 rounds to -0";
    EXPECT_EQ(w.code(0, 0, 2), 0x0u);
    EXPECT_EQ(out[1], 0.0f);
    EXPECT_TRUE(std::signbit(out[1]));
    EXPECT_FALSE(std::signbit(out[2]));
    // A wire written by another MX encoder: code 0x8 in entry 3 under a finite scale.
    auto bytes = wire;
    unsigned char* codes = reinterpret_cast<unsigned char*>(bytes.data()) + kernels::block_codes_offset(code, 1, 16);
    codes[1] = uint8_t((codes[1] & 0x0f) | 0x80);
    q.decode(bytes.data(), out.data());
    EXPECT_FALSE(std::isnan(out[3])) << "0x8 is -0, not NaN";
    EXPECT_EQ(out[3], 0.0f);
    EXPECT_TRUE(std::signbit(out[3]));
  }
}

// Error feedback (LEP / DP EF) around a block method resumes bit-exactly from
// its checkpointed residual, with either rounding.
TEST(BlockCompressor, ErrorFeedbackResumesBitExactly) {
  const int64_t r = 12, c = 70;
  for (const Format& f : kFormats)
    for (bool stochastic : {false, true}) {
      auto make = [&] {
        return std::make_unique<ErrorFeedback>(std::make_unique<BlockCompressor>(r, c, f.code, stochastic, 3, 4));
      };
      auto a = make();
      std::vector<float> wa(size_t(a->wire_floats())), wb(wa.size());
      for (uint32_t s = 0; s < 3; ++s) a->encode(gaussian(size_t(r * c), 30 + s).data(), wa.data());
      test::TempDir dir;
      TensorFileWriter w(nlohmann::json{{"what", "test"}});
      a->save_state(w, "cb/");
      w.write(dir.file("state.bin"));
      auto b = make();
      ASSERT_TRUE(b->load_state(TensorFileReader::open(dir.file("state.bin")), "cb/"));
      for (uint32_t s = 3; s < 6; ++s) {
        const auto x = gaussian(size_t(r * c), 30 + s);
        a->encode(x.data(), wa.data());
        b->encode(x.data(), wb.data());
        ASSERT_EQ(std::memcmp(wa.data(), wb.data(), wa.size() * 4), 0) << name_of(f) << " message " << s;
      }
      EXPECT_EQ(std::memcmp(a->residual().to_host().data(), b->residual().to_host().data(), size_t(r * c) * 4), 0);
    }
}

// Error feedback makes the running sum of decoded messages track the inputs'
// (the residual stays bounded), which is what lets a 3-bit code carry gradients.
TEST(BlockCompressor, ErrorFeedbackTracksTheRunningSum) {
  const int64_t r = 8, c = 64;
  for (const Format& f : kFormats) {
    ErrorFeedback ef(std::make_unique<BlockCompressor>(r, c, f.code, false, 1, 2));
    std::vector<double> sent(size_t(r * c), 0.0), sum(size_t(r * c), 0.0);
    std::vector<float> wire(size_t(ef.wire_floats())), out(size_t(r * c));
    for (uint32_t s = 0; s < 50; ++s) {
      const auto x = gaussian(size_t(r * c), 100 + s);
      ef.encode(x.data(), wire.data());
      ef.decode(wire.data(), out.data());
      for (size_t p = 0; p < x.size(); ++p) sum[p] += x[p], sent[p] += out[p];
    }
    double worst = 0;
    for (size_t p = 0; p < sum.size(); ++p) worst = std::max(worst, std::fabs(sum[p] - sent[p]));
    EXPECT_LT(worst, 2.0) << name_of(f) << ": the residual stays below a few scales after 50 messages";
  }
}

TEST(BlockCompressor, RoundingFlagParses) {
  EXPECT_FALSE(parse_rounding("nearest", "--x"));
  EXPECT_TRUE(parse_rounding("stochastic", "--x"));
  try {
    parse_rounding("up", "--grad-comp-rounding");
    FAIL() << "no throw";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--grad-comp-rounding 'up' is not a rounding; use nearest|stochastic"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(describe({CompressionMethod::Mxfp4, 16, 0.1, true}), "mxfp4 stochastic");
  EXPECT_EQ(describe({CompressionMethod::Int3, 16, 0.1, false}), "int3");
}

// Stochastic rounding on the pipeline links is keyed by the link, the step and
// the micro-batch (review finding 5): identical inputs in two micro-batches, or
// two steps, or on two links round independently (their errors average instead
// of adding up), while the same message id rounds the same (a resumed run).
TEST(BlockCompressor, PipelineLinksKeyStochasticRoundingByLinkStepAndMicroBatch) {
  const int64_t r = 16, c = 64;
  const auto x = gaussian(size_t(r * c), 77);
  ParallelLayout layout;
  layout.pp_size = 2, layout.pp_rank = 0;
  for (CompressionMethod m : {CompressionMethod::Mxfp4, CompressionMethod::Int3}) {
    ActivationCompressionConfig cfg{.enabled = true, .method = m, .stochastic = true};
    auto links = make_activation_links(cfg, layout, r, c, 1234);
    ASSERT_NE(links.send, nullptr);
    auto message = [&](MessageCodec& codec, MessageId id) {
      std::vector<float> wire(size_t(codec.wire_floats()));
      codec.encode(x.data(), wire.data(), id);
      return wire;
    };
    auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
      return std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
    };
    const auto mb0 = message(*links.send, {5, 0, 0});
    EXPECT_FALSE(same(mb0, message(*links.send, {5, 1, 0}))) << method_name(m) << ": another micro-batch";
    EXPECT_FALSE(same(mb0, message(*links.send, {6, 0, 0}))) << method_name(m) << ": another step";
    EXPECT_FALSE(same(mb0, message(*links.send, {5, 0, 1}))) << method_name(m) << ": another chunk";
    EXPECT_TRUE(same(mb0, message(*links.send, {5, 0, 0}))) << method_name(m) << ": the same message (a resume)";
    ParallelLayout other = layout;
    other.dp_rank = 1;
    auto replica = make_activation_links(cfg, other, r, c, 1234);
    EXPECT_FALSE(same(mb0, message(*replica.send, {5, 0, 0}))) << method_name(m) << ": another DP rank's link";
    auto reseeded = make_activation_links(cfg, layout, r, c, 99);
    EXPECT_FALSE(same(mb0, message(*reseeded.send, {5, 0, 0}))) << method_name(m) << ": another --seed";
    // Rounding to nearest draws no bits: every message of the same inputs is the same.
    ActivationCompressionConfig nearest{.enabled = true, .method = m};
    auto plain = make_activation_links(nearest, layout, r, c, 1234);
    EXPECT_TRUE(same(message(*plain.send, {5, 0, 0}), message(*plain.send, {6, 3, 1}))) << method_name(m);
  }
  // The backward links likewise (a sender's LEP residual aside: without it here).
  CompressedBackpropConfig cb;
  cb.enabled = true, cb.method = CompressionMethod::Mxfp4, cb.stochastic = true;
  layout.pp_rank = 1;
  auto back = make_backprop_links(cb, layout, r, c, 1234);
  ASSERT_NE(back.send[0], nullptr);
  std::vector<float> a(size_t(back.send[0]->wire_floats())), b(a.size());
  back.send[0]->encode(x.data(), a.data(), {5, 0, 0});
  back.send[0]->encode(x.data(), b.data(), {5, 1, 0});
  EXPECT_NE(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
}

}  // namespace
}  // namespace occ
