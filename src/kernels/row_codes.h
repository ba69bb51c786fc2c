#pragma once
// The wires of the byte compressors, here so that both backends pack them
// (kernels/row_codes.cpp, kernels/cuda/row_codes.cu) from the same per-entry
// functions, compiled for host and device (OCC_HD), into the same bytes.
//
// One-byte codes with a per-row scale: the wire of the int8 and fp8
// compressors (compress/int8_compressor.h, compress/fp8_compressor.h).
//
//   scale_i = max_j |x_ij| / top(code)    (NaN entries do not count)
//   code_ij = encode(x_ij / scale_i)      (a NaN entry and a row whose scale
//                                          is not positive send the code of 0)
//   x_hat   = decode(code_ij) * scale_i
// The maximum, the one division and the conversions are exact IEEE operations
// in any order, so both backends send the same bytes.
//
// Wire (bytes, in a buffer of 32-bit words): [0, 4n) the n fp32 scales,
// [4n, 4n + n*c) the codes row-major, then zero bytes to a whole word.
#include <cmath>
#include <cstdint>

#include "core/precision.h"

namespace occ::kernels {

// Words (4 bytes) holding `bytes` bytes, and bytes holding `bits` bits.
OCC_HD constexpr int64_t words_for_bytes(int64_t bytes) { return (bytes + 3) / 4; }
OCC_HD constexpr int64_t bytes_for_bits(int64_t bits) { return (bits + 7) / 8; }

enum class RowCode { Int8, Fp8E4M3, Fp8E5M2 };

// The largest code's value: the row's absmax maps onto it.
OCC_HD inline float row_code_top(RowCode code) {
  return code == RowCode::Int8 ? 127.0f : code == RowCode::Fp8E4M3 ? 448.0f : 57344.0f;
}

// v = x / scale, not NaN (it may exceed top by an ulp for the row's absmax:
// int8 clamps, the fp8 conversions saturate).
OCC_HD inline uint8_t row_encode(RowCode code, float v) {
  if (code == RowCode::Fp8E4M3) return float_to_fp8_e4m3(v);
  if (code == RowCode::Fp8E5M2) return float_to_fp8_e5m2(v);
  // Round to nearest, ties to even. An infinite absmax makes v NaN, which has no code: 0.
  float q = rintf(v);
  q = q != q ? 0.0f : fminf(127.0f, fmaxf(-127.0f, q));
  return static_cast<uint8_t>(static_cast<int8_t>(q));
}

OCC_HD inline float row_decode(RowCode code, uint8_t c) {
  if (code == RowCode::Fp8E4M3) return fp8_e4m3_to_float(c);
  if (code == RowCode::Fp8E5M2) return fp8_e5m2_to_float(c);
  return float(static_cast<int8_t>(c));
}

// Bytes of the wire before padding.
inline int64_t row_code_bytes(int64_t n, int64_t c) { return 4 * n + n * c; }

// ---- sign (1-bit) codes: compress/sign_compressor.h -----------------------------
// [0, 4n) the n fp32 scales (mean |x| of the row, summed in double in column
// order: the same bits on both backends), then the sign bits of the whole
// matrix as one bit string (entry p = i*c + j is bit p % 8 of byte p / 8),
// then zero bytes to a whole word.
inline int64_t sign_code_bytes(int64_t n, int64_t c) { return 4 * n + bytes_for_bits(n * c); }

// ---- top-k codes: compress/topk_compressor.h -------------------------------------
// Per row the k entries of largest |x| (compared as fp32 bit patterns without
// the sign, a total order; ties to the lower column), in column order:
// [0, 4nk) their values (row i at i*k), then either their int32 column indices
// (n*k of them; `bitmap` false) or one bitmap of ceil(c / 8) bytes per row
// (bit j % 8 of byte j / 8, set = kept), then zero bytes to a whole word.
inline int64_t topk_code_bytes(int64_t n, int64_t c, int64_t k, bool bitmap) {
  return bitmap ? 4 * n * k + n * bytes_for_bits(c) : 8 * n * k;
}
// The order of selection: is entry a (bits ua) kept before entry b (bits ub)?
OCC_HD inline bool topk_before(uint32_t ua, int64_t a, uint32_t ub, int64_t b) {
  const uint32_t ma = ua & 0x7fffffffu, mb = ub & 0x7fffffffu;
  return ma != mb ? ma > mb : a < b;
}

}  // namespace occ::kernels
