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

// ---- 16-bit storage (a --bf16 / --fp16 step's tensors on the GPU) ----------
// The bits of the 16-bit value nearest to x (ties to even, as round_bf16 /
// round_fp16), and back: exact, so a value already of the format round-trips.
OCC_HD inline uint16_t bf16_bits(float x) { return uint16_t(float_bits(round_bf16(x)) >> 16); }
OCC_HD inline float bf16_value(uint16_t b) { return bits_float(uint32_t(b) << 16); }
OCC_HD inline uint16_t fp16_bits(float x) {
  const float r = round_fp16(x);
  const uint32_t u = float_bits(r), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (a >= 0x47800000u) return uint16_t(sign | 0x7c00u);  // infinity (round_fp16 already overflowed)
  if (a < 0x38800000u) {                                  // subnormal: r is a multiple of 2^-24
    const float m = bits_float(a) * 16777216.0f;         // exact integer below 1024
    return uint16_t(sign | uint32_t(m));
  }
  return uint16_t(sign | (((a >> 23) - 112u) << 10) | ((a >> 13) & 0x3ffu));
}
OCC_HD inline float fp16_value(uint16_t b) {
  const uint32_t sign = uint32_t(b & 0x8000u) << 16, e = (b >> 10) & 0x1fu, m = b & 0x3ffu;
  if (e == 31) return bits_float(sign | 0x7f800000u | (m << 13));        // infinity, NaN
  if (e == 0) return bits_float(sign | float_bits(float(m) * 0x1p-24f));  // subnormal, exact
  return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}
OCC_HD inline uint16_t sixteen_bits(Precision p, float x) { return p == Precision::Bf16 ? bf16_bits(x) : fp16_bits(x); }
OCC_HD inline float sixteen_value(Precision p, uint16_t b) { return p == Precision::Bf16 ? bf16_value(b) : fp16_value(b); }

// ---- FP8 (OCP 8-bit floating point, used by the fp8 gradient compressor) ----
// E4M3FN: bias 7, 3 mantissa bits, max 448 (0x7e), subnormals down to 2^-9,
//   no infinities, NaN only as 0x7f / 0xff.
// E5M2:   bias 15, 2 mantissa bits, max 57344 (0x7b), subnormals down to 2^-16,
//   IEEE-like: 0x7c = infinity, 0x7d..0x7f = NaN (i.e. the top byte of fp16).
// Encoding rounds to nearest, ties to even, and saturates: every finite value
// beyond the largest code, and infinity, becomes +-max ("satfinite"); the
// compressor scales rows into range, so a clamped outlier costs less than an
// infinity that would poison the decoded gradient. NaN stays NaN, signs
// (including -0) are kept. Integer-only, so it is bit-exact on any host or device.

// |x| (its bits a, not NaN) rounded to the grid of a format with mbits mantissa
// bits and exponent bias `bias`, as the code exponent:mantissa; unbounded above
// (the caller clamps), which is why the carry of rounding may run into the exponent.
OCC_HD inline uint32_t fp8_round_magnitude(uint32_t a, int mbits, int bias) {
  const int e = int(a >> 23) - 127;  // unbiased exponent (fp32 subnormals: far below any fp8 value)
  if (e + bias >= 1) {               // a normal number of the target format
    const int shift = 23 - mbits;
    const uint32_t rebased = a - (uint32_t(127 - bias) << 23);  // same mantissa, target's exponent bias
    return (rebased + ((1u << (shift - 1)) - 1u) + ((rebased >> shift) & 1u)) >> shift;
  }
  // Subnormal target: value / 2^(1-bias-mbits) = significand >> s, rounded half to even.
  const int s = 24 - bias - mbits - e;
  if (s > 24) return 0;  // below half the smallest subnormal (also fp32 zero / subnormals)
  const uint32_t sig = (a & 0x7fffffu) | 0x800000u, q = sig >> s, rem = sig & ((1u << s) - 1u), half = 1u << (s - 1);
  return q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
}

OCC_HD inline uint8_t float_to_fp8_e4m3(float x) {
  const uint32_t u = float_bits(x), sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint8_t(sign | 0x7fu);  // NaN
  const uint32_t c = fp8_round_magnitude(a, 3, 7);   // infinity rounds far above 0x7e
  return uint8_t(sign | (c > 0x7eu ? 0x7eu : c));    // 0x7f would be NaN: saturate at 448
}

OCC_HD inline float fp8_e4m3_to_float(uint8_t c) {
  const uint32_t sign = uint32_t(c & 0x80u) << 24, e = (c >> 3) & 0xfu, m = c & 7u;
  uint32_t mag;
  if (e == 15 && m == 7) mag = 0x7fc00000u;                      // NaN
  else if (e == 0) mag = float_bits(float(m) * 0x1p-9f);         // subnormal: m * 2^-9, exact
  else mag = ((e + 127u - 7u) << 23) | (m << 20);
  return bits_float(sign | mag);
}

OCC_HD inline uint8_t float_to_fp8_e5m2(float x) {
  const uint32_t u = float_bits(x), sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint8_t(sign | 0x7eu);  // NaN (fp16's quiet NaN 0x7e00, top byte)
  const uint32_t c = fp8_round_magnitude(a, 2, 15);
  return uint8_t(sign | (c > 0x7bu ? 0x7bu : c));    // saturate at 57344 (satfinite)
}

OCC_HD inline float fp8_e5m2_to_float(uint8_t c) {
  const uint32_t sign = uint32_t(c & 0x80u) << 24, e = (c >> 2) & 0x1fu, m = c & 3u;
  uint32_t mag;
  if (e == 31) mag = m == 0 ? 0x7f800000u : 0x7fc00000u;         // infinity, NaN
  else if (e == 0) mag = float_bits(float(m) * 0x1p-16f);        // subnormal: m * 2^-16, exact
  else mag = ((e + 127u - 15u) << 23) | (m << 21);
  return bits_float(sign | mag);
}

}  // namespace occ
