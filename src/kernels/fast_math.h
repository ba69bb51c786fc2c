#pragma once
// Vectorisable exp/tanh: the compiler turns loops over these into AVX-512
// code, where std::exp would stay a scalar libm call. Relative error ~1e-7.
#include <bit>
#include <cstdint>

namespace occ::kernels {

inline float fast_exp(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  // x = n ln2 + g with |g| <= ln2/2 (Cody-Waite split of ln2 for accuracy).
  // Round to nearest with the 1.5 * 2^23 trick: floorf() would block vectorisation.
  float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float g = x - n * 0.693359375f;
  g = g + n * 2.12194440e-4f;
  // e^g by its Taylor series to degree 7: truncation error < 1e-8 on |g| <= 0.35.
  float p = 1.0f / 5040.0f;
  p = p * g + 1.0f / 720.0f;
  p = p * g + 1.0f / 120.0f;
  p = p * g + 1.0f / 24.0f;
  p = p * g + 1.0f / 6.0f;
  p = p * g + 0.5f;
  p = p * g + 1.0f;
  p = p * g + 1.0f;
  int32_t bits = std::bit_cast<int32_t>(p) + (int32_t(n) << 23);
  return std::bit_cast<float>(bits);
}

inline float fast_tanh(float x) { return 1.0f - 2.0f / (fast_exp(2.0f * x) + 1.0f); }

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluC = 0.044715f;

}  // namespace occ::kernels
