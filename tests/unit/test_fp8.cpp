// The fp8 conversions of core/precision.h (used by compress/fp8_compressor.h):
//   every code round-trips (decode, encode); decode is strictly monotone over the
//   ordered codes; ties go to the even code; out of range saturates; encode equals
//   an independent reference (the nearest code by exhaustive search, ties to even)
//   on a sweep; E5M2 equals the top byte of fp16 (the compiler's _Float16) rounded
//   to nearest even.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "compress/fp8_compressor.h"
#include "compress/int8_compressor.h"
#include "compress/powersgd.h"
#include "compress/sign_compressor.h"
#include "compress/topk_compressor.h"
#include "core/error.h"
#include "core/precision.h"
#include "core/tensor_file.h"
#include "temp_dir.h"

#include "compressor_test_util.h"

namespace occ {
namespace {
using namespace occ::test;

// ---- fp8 conversions --------------------------------------------------------

TEST(Fp8Conversion, KnownValues) {
  EXPECT_EQ(fp8_e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(fp8_e4m3_to_float(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_float(0xc0), -2.0f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0x7f)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0xff)));
  EXPECT_EQ(fp8_e5m2_to_float(0x7b), 57344.0f);
  EXPECT_EQ(fp8_e5m2_to_float(0x3c), 1.0f);
  EXPECT_EQ(fp8_e5m2_to_float(0x04), std::ldexp(1.0f, -14));
  EXPECT_EQ(fp8_e5m2_to_float(0x01), std::ldexp(1.0f, -16));
  EXPECT_EQ(fp8_e5m2_to_float(0x7c), std::numeric_limits<float>::infinity());
  EXPECT_EQ(fp8_e5m2_to_float(0xfc), -std::numeric_limits<float>::infinity());
  for (uint8_t c : {0x7d, 0x7e, 0x7f, 0xfd, 0xfe, 0xff}) EXPECT_TRUE(std::isnan(fp8_e5m2_to_float(c))) << int(c);
  EXPECT_EQ(bits_of(fp8_e4m3_to_float(0x80)), 0x80000000u);  // -0
  EXPECT_EQ(bits_of(fp8_e5m2_to_float(0x80)), 0x80000000u);
}

TEST(Fp8Conversion, EveryCodeRoundTrips) {
  for (const Fp8Case& f : {kE4m3, kE5m2}) {
    for (int c = 0; c < 256; ++c) {
      const float v = f.decode(uint8_t(c));
      const uint8_t back = f.encode(v);
      if (std::isnan(v)) {
        EXPECT_TRUE(std::isnan(f.decode(back))) << f.name << " code " << c;
        EXPECT_EQ(back & 0x80, c & 0x80) << f.name << " NaN keeps its sign";
      } else if (std::isinf(v)) {  // e5m2 only: encoding saturates
        EXPECT_EQ(back, (c & 0x80) | f.max_code) << f.name << " code " << c;
      } else {
        EXPECT_EQ(back, c) << f.name << " code " << c << " value " << v;  // includes -0 (0x80)
      }
    }
  }
}

TEST(Fp8Conversion, DecodeIsStrictlyMonotone) {
  for (const Fp8Case& f : {kE4m3, kE5m2}) {
    for (int c = 1; c <= f.max_code; ++c) {
      EXPECT_LT(f.decode(uint8_t(c - 1)), f.decode(uint8_t(c))) << f.name << " code " << c;
      EXPECT_EQ(f.decode(uint8_t(c | 0x80)), -f.decode(uint8_t(c))) << f.name << " code " << c;
    }
  }
}

// Halfway points computed by hand from the code tables above.
TEST(Fp8Conversion, TiesRoundToEven) {
  // e4m3: 1.0 = 0x38, 1.125 = 0x39, 1.25 = 0x3a.
  EXPECT_EQ(float_to_fp8_e4m3(1.0625f), 0x38);                       // halfway 0x38/0x39 -> even 0x38
  EXPECT_EQ(float_to_fp8_e4m3(std::nextafter(1.0625f, 2.0f)), 0x39);  // just above -> up
  EXPECT_EQ(float_to_fp8_e4m3(1.1875f), 0x3a);                       // halfway 0x39/0x3a -> even 0x3a
  EXPECT_EQ(float_to_fp8_e4m3(-1.1875f), 0xba);
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(1.0f, -10)), 0x00);    // half the smallest subnormal -> 0
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(3.0f, -10)), 0x02);    // 1.5 * 2^-9 -> 2 * 2^-9
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(15.0f, -10)), 0x08);   // 7.5 * 2^-9 -> smallest normal
  // Top binade: 256 + 32 m, i.e. 0x7a = 320, 0x7b = 352, 0x7c = 384, 0x7d = 416, 0x7e = 448.
  EXPECT_EQ(float_to_fp8_e4m3(432.0f), 0x7e);  // halfway 416/448 -> even 0x7e
  EXPECT_EQ(float_to_fp8_e4m3(400.0f), 0x7c);  // halfway 384/416 -> even 0x7c
  EXPECT_EQ(float_to_fp8_e4m3(336.0f), 0x7a);  // halfway 320/352 -> even 0x7a
  // e5m2: 1.0 = 0x3c, 1.25 = 0x3d, 1.5 = 0x3e.
  EXPECT_EQ(float_to_fp8_e5m2(1.125f), 0x3c);
  EXPECT_EQ(float_to_fp8_e5m2(1.375f), 0x3e);
  EXPECT_EQ(float_to_fp8_e5m2(std::ldexp(1.0f, -17)), 0x00);
  EXPECT_EQ(float_to_fp8_e5m2(std::ldexp(3.0f, -17)), 0x02);
  EXPECT_EQ(float_to_fp8_e5m2(-std::ldexp(7.0f, -17)), 0x84);   // 3.5 * 2^-16 -> 4 * 2^-16 = 2^-14
}

TEST(Fp8Conversion, SaturatesAndKeepsNan) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (float x : {464.0f, 480.0f, 1e6f, 3e38f, inf}) {
    EXPECT_EQ(float_to_fp8_e4m3(x), 0x7e) << x;
    EXPECT_EQ(float_to_fp8_e4m3(-x), 0xfe) << x;
  }
  for (float x : {61440.0f, 65536.0f, 1e9f, inf}) {
    EXPECT_EQ(float_to_fp8_e5m2(x), 0x7b) << x;
    EXPECT_EQ(float_to_fp8_e5m2(-x), 0xfb) << x;
  }
  EXPECT_EQ(float_to_fp8_e4m3(nan), 0x7f);
  EXPECT_EQ(float_to_fp8_e4m3(-nan), 0xff);
  EXPECT_TRUE(std::isnan(fp8_e5m2_to_float(float_to_fp8_e5m2(nan))));
  EXPECT_EQ(float_to_fp8_e4m3(std::numeric_limits<float>::denorm_min()), 0x00);
  EXPECT_EQ(float_to_fp8_e5m2(-std::numeric_limits<float>::denorm_min()), 0x80);
}

// Independent reference: the finite code nearest to x (exhaustive search in
// double), ties to the even code; beyond the range, the largest code.
uint8_t nearest_code(const Fp8Case& f, float x) {
  const double ax = std::fabs(double(x));
  int best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (int c = 0; c <= f.max_code; ++c) {
    const double d = std::fabs(ax - double(f.decode(uint8_t(c))));
    if (d < best_d || (d == best_d && (c & 1) == 0)) best = c, best_d = d;
  }
  return uint8_t(best | (std::signbit(x) ? 0x80 : 0));
}

TEST(Fp8Conversion, MatchesNearestCodeReference) {
  for (const Fp8Case& f : {kE4m3, kE5m2}) {
    std::vector<float> xs;
    // Every midpoint between neighbouring codes, and its two float neighbours.
    for (int c = 0; c < f.max_code; ++c) {
      const float mid = 0.5f * (f.decode(uint8_t(c)) + f.decode(uint8_t(c + 1)));  // exact in fp32
      for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) xs.insert(xs.end(), {x, -x});
    }
    // Random magnitudes over the whole range, from far below the subnormals to past the max.
    std::mt19937 gen(7);
    std::uniform_real_distribution<float> mant(1.0f, 2.0f);
    std::uniform_int_distribution<int> expo(f.mbits == 3 ? -14 : -22, f.mbits == 3 ? 10 : 17);
    for (int i = 0; i < 100000; ++i) xs.push_back((i & 1 ? -1.0f : 1.0f) * std::ldexp(mant(gen), expo(gen)));
    int bad = 0;
    for (float x : xs) {
      if (f.encode(x) != nearest_code(f, x) && ++bad <= 5)
        ADD_FAILURE() << f.name << " x=" << x << " got " << int(f.encode(x)) << " want " << int(nearest_code(f, x));
    }
    EXPECT_EQ(bad, 0) << f.name;
  }
}

// fp16 bits rounded to their top byte, ties to even, saturating at 0x7b: E5M2
// by definition (same sign, exponent width and bias).
[[maybe_unused]] uint8_t fp16_top_byte_rne(uint16_t h) {
  const uint32_t sign = (h >> 8) & 0x80u, a = h & 0x7fffu;
  if (a > 0x7c00u) return uint8_t(sign | 0x7eu);
  const uint32_t r = (a + 0x7fu + ((a >> 8) & 1u)) >> 8;
  return uint8_t(sign | std::min(r, 0x7bu));
}

TEST(Fp8Conversion, E5m2IsTheTopByteOfFp16) {
#if !defined(__FLT16_MANT_DIG__)
  GTEST_SKIP() << "this compiler has no _Float16 (clang < 15 on x86); the GCC build runs this check";
#else
  // All fp16 values (exact in fp32).
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    _Float16 v;
    const uint16_t hb = uint16_t(h);
    std::memcpy(&v, &hb, 2);
    const float x = float(v);
    if (std::isnan(x)) continue;
    ASSERT_EQ(float_to_fp8_e5m2(x), fp16_top_byte_rne(hb)) << "fp16 bits " << h;
  }
  // Random floats: fp16 rounding then byte rounding equals direct rounding,
  // except double rounding onto an exact fp16 midpoint (low byte 0x80, inexact).
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-26, 15);
  int compared = 0;
  for (int i = 0; i < 200000; ++i) {
    const float x = (i & 1 ? -1.0f : 1.0f) * std::ldexp(mant(gen), expo(gen));
    const _Float16 v = static_cast<_Float16>(x);
    uint16_t hb;
    std::memcpy(&hb, &v, 2);
    if ((hb & 0xffu) == 0x80u && float(v) != x) continue;
    ++compared;
    ASSERT_EQ(float_to_fp8_e5m2(x), fp16_top_byte_rne(hb)) << "x=" << x;
  }
  EXPECT_GT(compared, 190000);
#endif
}

}  // namespace
}  // namespace occ
