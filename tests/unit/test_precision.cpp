// Reduced-precision rounding (the definition of --bf16 / --fp16 numerics) against
// independent references, and the fp16 dynamic loss scaler's state machine.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/precision.h"
#include "kernels/ops.h"
#include "train/loss_scaler.h"

namespace occ {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Reference: the two bf16 neighbours of x, the nearer one, ties to the even mantissa.
float bf16_reference(float x) {
  const uint32_t u = to_bits(x);
  const float lo = from_bits(u & 0xffff0000u), hi = from_bits((u & 0xffff0000u) + 0x10000u);
  // Past the largest bf16 the upper neighbour is infinity; IEEE rounds to it
  // from half an ulp above the largest value, i.e. as if it were 2^128.
  const double hi_value = std::isinf(hi) ? std::copysign(std::ldexp(1.0, 128), double(x)) : double(hi);
  const double dlo = std::fabs(double(x) - lo), dhi = std::fabs(hi_value - x);
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return ((u >> 16) & 1u) ? hi : lo;
}

TEST(Precision, Bf16MatchesNearestEvenOnASweepOfAllExponents) {
  int64_t checked = 0;
  for (uint64_t u = 0; u < (1ull << 32); u += 65537) {  // hits every exponent and many mantissas
    const float x = from_bits(uint32_t(u));
    if (!std::isfinite(x)) continue;
    const float want = bf16_reference(x);
    ASSERT_EQ(to_bits(round_bf16(x)), to_bits(want)) << "x bits " << std::hex << u;
    ++checked;
  }
  EXPECT_GT(checked, 60000);
  // Ties: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: to even (1).
  EXPECT_EQ(round_bf16(1.0f + 1.0f / 256), 1.0f);
  EXPECT_EQ(round_bf16(1.0f + 3.0f / 256), 1.0f + 4.0f / 256);
  EXPECT_TRUE(std::isnan(round_bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(round_bf16(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
}

TEST(Precision, Fp16MatchesTheCompilersHalfConversion) {
#if !defined(__FLT16_MANT_DIG__)
  GTEST_SKIP() << "this compiler has no _Float16 (clang < 15 on x86); the GCC build runs this check";
#else
  // GCC's _Float16 conversion is IEEE round-to-nearest-even: an independent reference.
  int64_t checked = 0;
  for (uint64_t u = 0; u < (1ull << 32); u += 4099) {
    const float x = from_bits(uint32_t(u));
    if (std::isnan(x)) continue;
    const float want = float(static_cast<_Float16>(x));
    ASSERT_EQ(to_bits(round_fp16(x)), to_bits(want)) << "x bits " << std::hex << u << " x=" << x;
    ++checked;
  }
  EXPECT_GT(checked, 1000000);
  EXPECT_EQ(round_fp16(65504.0f), 65504.0f);          // the largest half
  EXPECT_EQ(round_fp16(65519.0f), 65504.0f);
  EXPECT_TRUE(std::isinf(round_fp16(65520.0f)));     // overflow: what loss scaling must avoid
  EXPECT_EQ(round_fp16(std::ldexp(1.0f, -24)), std::ldexp(1.0f, -24));  // the smallest subnormal
  EXPECT_EQ(round_fp16(std::ldexp(1.0f, -26)), 0.0f);
#endif
}

TEST(Precision, CpuOpsRoundsInPlaceAndFp32IsIdentity) {
  float x[3] = {1.0f + 1.0f / 1024, 70000.0f, -3.14159265f};
  float y[3] = {x[0], x[1], x[2]};
  kernels::cpu_ops().round_to_precision(y, 3, Precision::Fp32);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(y[i], x[i]);
  kernels::cpu_ops().round_to_precision(y, 3, Precision::Fp16);
  EXPECT_EQ(y[0], 1.0f + 1.0f / 1024);
  EXPECT_TRUE(std::isinf(y[1]));
  EXPECT_EQ(y[2], round_fp16(x[2]));
}

TEST(LossScaler, Fp32AndBf16DoNotScale) {
  LossScaler s(Precision::Bf16, {});
  EXPECT_FALSE(s.active());
  EXPECT_EQ(s.scale(), 1.0f);
  EXPECT_FALSE(s.update(true));
  EXPECT_TRUE(s.update(false));  // a non-finite step is still never applied
}

TEST(LossScaler, DynamicBacksOffAfterHysteresisAndGrowsAfterWindow) {
  LossScaleConfig c;
  c.initial_loss_scale = 1024;
  c.min_loss_scale = 256;
  c.loss_scale_window = 3;
  c.hysteresis = 2;
  LossScaler s(Precision::Fp16, c);
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_TRUE(s.update(false));  // first overflow: skipped, scale kept (hysteresis)
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_TRUE(s.update(false));  // second: halved
  EXPECT_EQ(s.scale(), 512);
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 256);
  EXPECT_TRUE(s.update(false));  // floor
  EXPECT_EQ(s.scale(), 256);
  EXPECT_EQ(s.skipped(), 4);
  for (int i = 0; i < 2; ++i) EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 256);
  EXPECT_FALSE(s.update(true));  // third clean step in a row: doubled
  EXPECT_EQ(s.scale(), 512);
  // State round-trips (checkpoints).
  LossScaler r(Precision::Fp16, c);
  r.load_state(s.state());
  EXPECT_EQ(r.state(), s.state());
}

TEST(LossScaler, StaticScaleSkipsButNeverChanges) {
  LossScaleConfig c;
  c.loss_scale = 128;
  LossScaler s(Precision::Fp16, c);
  EXPECT_EQ(s.scale(), 128);
  EXPECT_TRUE(s.update(false));
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 128);
  EXPECT_EQ(s.skipped(), 2);
}

TEST(LossScaler, BadConfigIsRefused) {
  LossScaleConfig c;
  c.loss_scale_window = 0;
  EXPECT_THROW(c.validate(), Error);
  c = {};
  c.min_loss_scale = 0;
  EXPECT_THROW(c.validate(), Error);
}

}  // namespace
}  // namespace occ
