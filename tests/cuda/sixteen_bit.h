#pragma once
// Host conversion between fp32 values and 16-bit bit patterns (bf16, fp16) for
// tests that hand 16-bit device buffers to kernels. The rounding is
// core/precision.h's round_bf16 / round_fp16 (the project's definition), so
// from_16bit(to_16bit(x)) == round_to(format, x) exactly.
#include <cstdint>
#include <vector>

#include "core/precision.h"

namespace occ::kernels {

inline uint16_t to_16bit(float x, Precision format) {
  if (format == Precision::Bf16) return uint16_t(float_bits(round_bf16(x)) >> 16);
  const uint32_t u = float_bits(round_fp16(x)), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
  if (a == 0x7f800000u) return uint16_t(sign | 0x7c00u);  // infinity
  // Below 2^-14 round_fp16 left a multiple of 2^-24: that multiple is the code
  // (1024 when it rounded up to 2^-14, which is the smallest normal's code).
  if (a < 0x38800000u) return uint16_t(sign | uint32_t(bits_float(a) * 16777216.0f));
  const uint32_t exponent = (a >> 23) - 127 + 15, mantissa = (a >> 13) & 0x3ffu;
  return uint16_t(sign | exponent << 10 | mantissa);
}

inline float from_16bit(uint16_t h, Precision format) {
  if (format == Precision::Bf16) return bits_float(uint32_t(h) << 16);
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  uint32_t magnitude;
  if (exponent == 0) magnitude = float_bits(float(mantissa) * (1.0f / 16777216.0f));  // subnormal, exact
  else if (exponent == 31) magnitude = mantissa ? 0x7fc00000u : 0x7f800000u;
  else magnitude = (exponent - 15 + 127) << 23 | mantissa << 13;
  return bits_float(sign | magnitude);
}

inline std::vector<uint16_t> to_16bit(const std::vector<float>& v, Precision format) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = to_16bit(v[i], format);
  return out;
}
inline std::vector<float> from_16bit(const std::vector<uint16_t>& v, Precision format) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = from_16bit(v[i], format);
  return out;
}
// The values a 16-bit buffer made from v holds, as fp32 (the CPU reference's inputs).
inline std::vector<float> rounded(std::vector<float> v, Precision format) {
  for (float& x : v) x = round_to(format, x);
  return v;
}

}  // namespace occ::kernels
