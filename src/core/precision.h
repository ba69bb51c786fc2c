#pragma once
// Training precision (Megatron's --bf16 / --fp16) and bit-exact rounding of
// fp32 values to the reduced formats. The rounding functions are the
// definition of the reduced-precision numerics: the CPU backend applies them
// to fp32 storage (the reference), a GPU kernel calls the same functions
// (OCC_HD), and real bf16/fp16 storage must round identically.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/rng.h"  // OCC_HD

namespace occ {

enum class Precision { Fp32, Bf16, Fp16 };

inline const char* precision_name(Precision p) {
  return p == Precision::Bf16 ? "bf16" : p == Precision::Fp16 ? "fp16" : "fp32";
}

OCC_HD inline uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
#endif
}
OCC_HD inline float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, 4);
  return x;
#endif
}

// Nearest bfloat16 (ties to even), as an fp32 value. NaN stays NaN, infinities stay.
OCC_HD inline float round_bf16(float x) {
  uint32_t u = float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return x;  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return bits_float(u & 0xffff0000u);
}

// Nearest IEEE binary16 (ties to even), as an fp32 value: magnitudes from
// 65520 up overflow to infinity (what fp16 loss scaling guards against), those
// below 2^-14 are rounded to the subnormal grid of 2^-24.
OCC_HD inline float round_fp16(float x) {
  const uint32_t u = float_bits(x), sign = u & 0x80000000u, a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) return x;                     // inf, NaN
  if (a >= 0x477ff000u) return bits_float(sign | 0x7f800000u);  // >= 65520: infinity
  if (a < 0x38800000u) {                              // below 2^-14: subnormal grid
    const float q = rintf(bits_float(a) * 16777216.0f) * (1.0f / 16777216.0f);  // rint: ties to even
    return bits_float(sign | float_bits(q));
  }
  const uint32_t r = (a + 0xfffu + ((a >> 13) & 1u)) & ~0x1fffu;
  return bits_float(sign | r);
}

OCC_HD inline float round_to(Precision p, float x) {
  return p == Precision::Bf16 ? round_bf16(x) : p == Precision::Fp16 ? round_fp16(x) : x;
}

}  // namespace occ
