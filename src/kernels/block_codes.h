#pragma once
// Block-scaled codes of 2, 3 and 4 bits: the wires of the block compressors
// (compress/block_compressor.h), packed by both backends (kernels/block_codes.cpp,
// kernels/cuda/block_codes.cu) from the per-block functions below, compiled for
// host and device (OCC_HD), into the same bytes.
//
// Each row of a rows x cols matrix is cut into blocks of B entries; a last
// block the row length does not fill is padded with zeros, and its codes are
// sent (and counted) like the others. Per block, one scale and B codes:
//
//   mxfp4  OCP Microscaling (MX) v1.0 MXFP4: B = 32, E2M1 elements, one E8M0
//          scale X = 2^e per block by the spec's rule,
//            e = clamp(floor(log2(max |x|)) - 2, -127, 127)   (2: E2M1's emax)
//          elements E2M1(x / X) rounded to nearest even, saturating at +-6.
//          17 bytes per block: 4.25 bits per value.
//   nvfp4  NVIDIA NVFP4: B = 16, E2M1 elements, an E4M3 scale S per block and
//          one fp32 scale R per row:
//            R = max_row |x| / (6 * 448),  S = E4M3(max_block |x| / (6 * R)),
//          elements E2M1(x / (S * R)) (S as decoded; saturating at +-6).
//          9 bytes per block + 4 per row: 4.5 bits per value + the row scale.
//   int4   symmetric integers in [-7, 7] with a bf16 scale s per block of 32:
//            s = max |x| / 7 rounded up to bf16 (so |x| / s <= 7 but for the
//            fp32 rounding of the division), code = round(x / s).
//          18 bytes per block: 4.5 bits per value.
//   int3   the same with 3 bits, integers in [-3, 3]: 14 bytes per block,
//          3.5 bits per value (the sub-4-bit code; E1M1's values are int3's).
//   int2   2 bits, B = 64: the uniform mid-rise levels -1.5, -0.5, 0.5, 1.5
//          (codes 0..3, value (2 code - 3) / 2) times a bf16 scale
//          s = max |x| / 1.5 rounded up to bf16. 18 bytes per block: 2.25 bits per value.
//   lm2    2 bits, B = 64: the Lloyd-Max quantizer of a unit Gaussian (Max 1960;
//          the levels minimise E[(X - q(X))^2] for X ~ N(0, 1): each level is
//          the mean of X between its thresholds, each threshold the midpoint of
//          its levels), levels +-0.45278003, +-1.5104176 (MSE 0.11748), times a
//          bf16 scale s = the block's RMS, sqrt(sum x^2 / len) (double), rounded
//          up to bf16: for values made near-Gaussian by a rotation
//          (kernels/hadamard.h). 18 bytes per block: 2.25 bits per value.
//   lm3    the same with 3 bits: levels +-0.24509418, +-0.75600528,
//          +-1.3439093, +-2.1519457 (MSE 0.034548). 26 bytes per block: 3.25 bits per value.
//   (int2, lm2, lm3: codes are level indices in ascending order; to nearest,
//   a value on a threshold, the fp32 midpoint of two levels, takes the upper
//   level; stochastic: up from the level below with the probability of the
//   distance over the gap. Tests: tests/cli/low_bit_reference.sh, NumPy from
//   these definitions.)
//
// E2M1 (FP4): sign bit 3, magnitude code 0..7 = 0, 0.5, 1, 1.5, 2, 3, 4, 6.
// Rounding: to nearest, ties to even (the code with an even magnitude code),
// or stochastic: up with the probability of the distance from the grid point
// below (24 random bits per entry from Philox; see block_random_bits).
//
// Non-finite inputs: a NaN or an infinity makes its whole block NaN, the MX
// spec's way (OCP MX v1.0 section 5.2: a NaN scale makes every element of the
// block NaN): the block sends its scale format's NaN (mxfp4: E8M0 0xFF; nvfp4:
// E4M3 0x7F; int4 and int3: bf16 0x7FC0) and zero codes, and decodes to 32 (16)
// NaNs, so the non-finite value reaches the receiver's loss or gradient norm
// and the non-finite guard stops the run (train/nonfinite_guard.h) as it would
// without compression. No finite block sends a NaN scale. Every code means
// what its format says: E2M1 0x8 is -0 (a negative value that rounds to zero
// keeps its sign), so a standard MX decoder reads our mxfp4 messages; int4's
// -8 and int3's -4 are never sent (the codes are symmetric) and decode as
// their two's-complement values.
//
// Wire (bytes, in a buffer of 32-bit words), for n rows of nb = ceil(c / B) blocks:
//   mxfp4:  [0, n nb)                    E8M0 scales (biased exponent e + 127), row-major
//           [n nb, 17 n nb)               16 code bytes per block
//   nvfp4:  [0, 4n)                       fp32 row scales R
//           [4n, 4n + n nb)               E4M3 block scales
//           [4n + n nb, 4n + 9 n nb)      8 code bytes per block
//   int4:   [0, 2 n nb)                   bf16 block scales
//           [2 n nb, 18 n nb)             16 code bytes per block
//   int3:   [0, 2 n nb)                   bf16 block scales
//           [2 n nb, 14 n nb)             12 code bytes per block
//   int2, lm2: [0, 2 n nb) bf16 scales, [2 n nb, 18 n nb) 16 code bytes per block
//   lm3:    [0, 2 n nb) bf16 scales, [2 n nb, 26 n nb) 24 code bytes per block
// then zero bytes to a whole word. 4-bit codes: entry 2k of a block in the low
// nibble of its byte k, entry 2k + 1 in the high one; 2- and 3-bit codes: entry
// j at bits bj..bj+b-1 of the block's bytes read as one little-endian bit string.
//
// Every operation is an exact IEEE operation or an integer one, and no product
// feeds a sum (nothing a compiler may contract into an FMA), so both backends
// send the same bytes and decode the same values.
#include <cstdint>

#include "core/precision.h"
#include "core/rng.h"

namespace occ::kernels {

enum class BlockCode { Mxfp4, Nvfp4, Int4, Int3, Int2, Lm2, Lm3 };

// The 2- and 3-bit codes of level tables (int2, lm2, lm3).
OCC_HD constexpr bool block_code_is_table(BlockCode code) {
  return code == BlockCode::Int2 || code == BlockCode::Lm2 || code == BlockCode::Lm3;
}
OCC_HD constexpr int block_entries(BlockCode code) {
  return code == BlockCode::Nvfp4 ? 16 : block_code_is_table(code) ? 64 : 32;
}
OCC_HD constexpr int block_code_bits(BlockCode code) {
  return code == BlockCode::Int3 || code == BlockCode::Lm3 ? 3 : code == BlockCode::Int2 || code == BlockCode::Lm2 ? 2 : 4;
}
// Bytes of one block's codes and of its scale.
OCC_HD constexpr int block_code_bytes(BlockCode code) { return block_entries(code) * block_code_bits(code) / 8; }
OCC_HD constexpr int block_scale_bytes(BlockCode code) {
  return code == BlockCode::Mxfp4 || code == BlockCode::Nvfp4 ? 1 : 2;
}
// Bytes of the per-row scales (nvfp4's fp32 R).
OCC_HD constexpr int block_row_scale_bytes(BlockCode code) { return code == BlockCode::Nvfp4 ? 4 : 0; }
OCC_HD constexpr int64_t blocks_per_row(BlockCode code, int64_t c) {
  return (c + block_entries(code) - 1) / block_entries(code);
}
// Bytes of the wire before padding: the formulas above.
OCC_HD constexpr int64_t block_wire_bytes(BlockCode code, int64_t n, int64_t c) {
  return n * block_row_scale_bytes(code) +
         n * blocks_per_row(code, c) * (block_scale_bytes(code) + block_code_bytes(code));
}
// Where the parts start in the wire.
OCC_HD constexpr int64_t block_scales_offset(BlockCode code, int64_t n) { return n * block_row_scale_bytes(code); }
OCC_HD constexpr int64_t block_codes_offset(BlockCode code, int64_t n, int64_t c) {
  return block_scales_offset(code, n) + n * blocks_per_row(code, c) * block_scale_bytes(code);
}

// ---- E2M1 ---------------------------------------------------------------------

OCC_HD inline float e2m1_magnitude(uint32_t m) {  // m: 0..7
  return m < 4 ? 0.5f * float(m) : m < 6 ? float(m - 2) : m == 6 ? 4.0f : 6.0f;
}
// |v| (not NaN) to the nearest magnitude code, ties to the even code; beyond 6: 7 (saturation).
OCC_HD inline uint32_t e2m1_nearest(float a) {
  // The midpoints 0.25 0.75 1.25 1.75 2.5 3.5 5: a tie goes to the even code,
  // i.e. down from an even code's upper midpoint and up at an odd code's.
  return uint32_t(a > 0.25f) + uint32_t(a >= 0.75f) + uint32_t(a > 1.25f) + uint32_t(a >= 1.75f) +
         uint32_t(a > 2.5f) + uint32_t(a >= 3.5f) + uint32_t(a > 5.0f);
}
// |v| (not NaN) rounded down or up to a neighbouring magnitude code: up when
// the distance above the code below exceeds r * the step (r in [0, 1)).
// Beyond 6: 7 (saturation, as the nearest rounding).
OCC_HD inline uint32_t e2m1_stochastic(float a, float r) {
  if (a >= 6.0f) return 7;
  // The code below a: magnitudes 0..2 step 0.5, 2..4 step 1, 4..6 step 2.
  const uint32_t below = a < 2.0f ? uint32_t(a * 2.0f) : a < 4.0f ? uint32_t(a) + 2u : 6u;
  const float step = below < 4 ? 0.5f : below < 6 ? 1.0f : 2.0f;
  // a - e2m1_magnitude(below) is exact (Sterbenz) and r * step too (a power-of-two step).
  return below + uint32_t(a - e2m1_magnitude(below) > r * step);
}
// The code of v (not NaN): magnitude code | sign bit (a negative v that rounds to zero: 0x8, -0).
OCC_HD inline uint8_t e2m1_code(float v, bool stochastic, float r) {
  const float a = fabsf(v);
  const uint32_t m = stochastic ? e2m1_stochastic(a, r) : e2m1_nearest(a);
  return uint8_t(m | (v < 0.0f ? 8u : 0u));
}

// The value of a 4-bit E2M1 code (0x8: -0).
OCC_HD inline float e2m1_value(uint32_t code) {
  const float m = e2m1_magnitude(code & 7u);
  return (code & 8u) ? -m : m;
}

// ---- level tables: int2, lm2, lm3 -----------------------------------------------

OCC_HD constexpr int table_levels(BlockCode code) { return 1 << block_code_bits(code); }
// Level k (0 <= k < table_levels) of a table code, ascending; symmetric about 0.
OCC_HD inline float table_level(BlockCode code, int k) {
  const int K = table_levels(code), half = K / 2;
  const int m = k < half ? half - 1 - k : k - half;  // the magnitude's rank
  float a;
  if (code == BlockCode::Int2) a = m == 0 ? 0.5f : 1.5f;
  else if (code == BlockCode::Lm2) a = m == 0 ? 0.45278003463649213f : 1.510417608499096f;
  else a = m == 0 ? 0.24509417894422197f : m == 1 ? 0.7560052812058772f : m == 2 ? 1.3439092785050013f : 2.151945704536986f;
  return k < half ? -a : a;
}
// The threshold between levels k and k + 1: their midpoint in fp32.
OCC_HD inline float table_threshold(BlockCode code, int k) {
  return (table_level(code, k) + table_level(code, k + 1)) * 0.5f;
}
// The code of v = x / scale (not NaN): to nearest (on a threshold, the upper
// level), or stochastic with r in [0, 1); beyond the outer levels, saturating.
OCC_HD inline uint32_t table_code(BlockCode code, float v, bool stochastic, float r) {
  const int K = table_levels(code);
  if (!stochastic) {
    uint32_t c = 0;
    for (int k = 0; k + 1 < K; ++k) c += uint32_t(v >= table_threshold(code, k));
    return c;
  }
  if (!(v > table_level(code, 0))) return 0;
  int below = 0;  // the largest level <= v
  while (below + 1 < K && table_level(code, below + 1) <= v) ++below;
  if (below + 1 == K) return uint32_t(K - 1);
  const float gap = table_level(code, below + 1) - table_level(code, below);
  return uint32_t(below) + uint32_t(v - table_level(code, below) > r * gap);
}

// ---- scales ---------------------------------------------------------------------

// 2^e as a float, e in [-127, 127] (2^-127 is subnormal, exact).
OCC_HD inline float pow2f(int e) {
  return e >= -126 ? bits_float(uint32_t(e + 127) << 23) : bits_float(0x00400000u);
}
// The MX spec's shared exponent of a block whose largest finite magnitude is
// amax: floor(log2(amax)) - 2, at least -127 (also for amax = 0 and subnormal
// amax, whose floor(log2) is below -126).
OCC_HD inline int mx_shared_exponent(float amax) {
  const int field = int(float_bits(amax) >> 23);  // amax >= 0, finite
  const int e = field == 0 ? -127 : field - 127 - 2;
  return e < -127 ? -127 : e;
}
// The smallest bf16 value >= a (a >= 0 finite).
OCC_HD inline float bf16_round_up(float a) {
  const uint32_t u = float_bits(a);
  return bits_float((u & 0xffffu) ? (u + 0x10000u) & 0xffff0000u : u);
}

// ---- random bits of stochastic rounding ---------------------------------------------

// A block's rounding bits are drawn from Philox keyed by the compressor's key,
// at a counter made of the block's position in the message and a hash of its
// (finite) inputs: another message on the same
// link draws other bits, the same inputs draw the same bits on any backend,
// and the compressor needs no state (nothing to checkpoint).
OCC_HD inline uint64_t block_hash(const float* x, int len, int entries) {
  uint64_t h = 0x426c6f636bull;  // "Block"
  for (int j = 0; j < entries; ++j) {
    h = mix_key(h, j < len ? float_bits(x[j]) : 0u);
  }
  return h;
}
// The uniform in [0, 1) of entry j (24 bits: exact in fp32) from the block's four-entry Philox draws.
OCC_HD inline float block_random(const PhiloxBlock& draw, int j) { return float(draw[j & 3] >> 8) * 0x1p-24f; }

// ---- one block ------------------------------------------------------------------------

// What the encoder of a message needs besides the block's entries.
struct BlockCoding {
  BlockCode code = BlockCode::Mxfp4;
  bool stochastic = false;  // stochastic rounding (else nearest, ties to even)
  uint64_t key = 0;         // the Philox key of the rounding bits
};

OCC_HD inline bool finite_value(float v) { return (float_bits(v) & 0x7fffffffu) < 0x7f800000u; }

OCC_HD inline float block_absmax(const float* x, int len) {
  float amax = 0.0f;
  for (int j = 0; j < len; ++j)
    if (finite_value(x[j])) amax = fmaxf(amax, fabsf(x[j]));
  return amax;
}

// The RMS of a block's (finite) entries, sqrt(sum x^2 / len): squares and sum
// in double (a float's square is exact there, so a contracted FMA gives the
// same sum on either backend), rounded once to fp32.
OCC_HD inline float block_rms(const float* x, int len) {
  double sum = 0.0;
  for (int j = 0; j < len; ++j) sum += double(x[j]) * double(x[j]);
  return len > 0 ? float(sqrt(sum / double(len))) : 0.0f;
}

// The scale the entries are divided by (0: the block sends zeros), and the bytes of
// the block's scale: mxfp4 1 (E8M0), nvfp4 1 (E4M3; row_scale: the row's R), int 2 (bf16).
// amax: the block's largest finite magnitude (lm2 and lm3: its RMS instead).
OCC_HD inline float block_scale(BlockCode code, float amax, float row_scale, uint8_t* scale_bytes) {
  if (code == BlockCode::Mxfp4) {
    const int e = mx_shared_exponent(amax);
    scale_bytes[0] = uint8_t(e + 127);
    return pow2f(e);
  }
  if (code == BlockCode::Nvfp4) {
    const uint8_t s = row_scale > 0.0f ? float_to_fp8_e4m3(amax / (6.0f * row_scale)) : uint8_t(0);
    scale_bytes[0] = s;
    return fp8_e4m3_to_float(s) * row_scale;
  }
  const float s = code == BlockCode::Lm2 || code == BlockCode::Lm3
                      ? bf16_round_up(amax)
                      : bf16_round_up(amax / (code == BlockCode::Int4 ? 7.0f : code == BlockCode::Int2 ? 1.5f : 3.0f));
  const uint16_t b = uint16_t(float_bits(s) >> 16);
  scale_bytes[0] = uint8_t(b), scale_bytes[1] = uint8_t(b >> 8);
  return s;
}

// The code of one finite entry v = x / scale.
OCC_HD inline uint32_t block_entry_code(BlockCode code, float v, bool stochastic, float r) {
  if (code == BlockCode::Mxfp4 || code == BlockCode::Nvfp4) return e2m1_code(v, stochastic, r);
  if (block_code_is_table(code)) return table_code(code, v, stochastic, r);
  const float top = code == BlockCode::Int4 ? 7.0f : 3.0f;
  float q;
  if (stochastic) {
    const float f = floorf(v);
    q = f + (v - f > r ? 1.0f : 0.0f);  // v - f exact; the sum is of small integers
  } else {
    q = rintf(v);  // to nearest, ties to even
  }
  q = fminf(top, fmaxf(-top, q));
  const uint32_t mask = code == BlockCode::Int4 ? 0xfu : 0x7u;
  return uint32_t(int32_t(q)) & mask;
}
// The scale bytes of a block holding a NaN or an infinity: its scale format's NaN
// (E8M0 0xFF, E4M3 0x7F, bf16 0x7FC0), which makes the whole block NaN.
OCC_HD inline void block_nan_scale(BlockCode code, uint8_t* scale_bytes) {
  if (code == BlockCode::Mxfp4) scale_bytes[0] = 0xffu;
  else if (code == BlockCode::Nvfp4) scale_bytes[0] = 0x7fu;
  else scale_bytes[0] = 0xc0u, scale_bytes[1] = 0x7fu;  // bf16 0x7fc0, little-endian
}

OCC_HD inline void put_code(BlockCode code, uint8_t* bytes, int j, uint32_t c) {
  if (block_code_bits(code) == 4) {
    bytes[j >> 1] = uint8_t(bytes[j >> 1] | (c << (4 * (j & 1))));
    return;
  }
  if (block_code_bits(code) == 2) {
    bytes[j >> 2] = uint8_t(bytes[j >> 2] | (c << (2 * (j & 3))));
    return;
  }
  const int bit = 3 * j, at = bit >> 3, shift = bit & 7;
  bytes[at] = uint8_t(bytes[at] | (c << shift));
  if (shift > 5) bytes[at + 1] = uint8_t(bytes[at + 1] | (c >> (8 - shift)));
}
OCC_HD inline uint32_t get_code(BlockCode code, const uint8_t* bytes, int j) {
  if (block_code_bits(code) == 4) return (bytes[j >> 1] >> (4 * (j & 1))) & 0xfu;
  if (block_code_bits(code) == 2) return (bytes[j >> 2] >> (2 * (j & 3))) & 0x3u;
  const int bit = 3 * j, at = bit >> 3, shift = bit & 7;
  uint32_t v = uint32_t(bytes[at]) >> shift;
  if (shift > 5) v |= uint32_t(bytes[at + 1]) << (8 - shift);
  return v & 0x7u;
}

// Encodes one block: x[0, len) are its entries (len <= B; the rest are padding
// zeros). index: the block's position in the message (row * nb + block).
// row_scale: nvfp4's R of the block's row. Writes its scale bytes and its codes.
OCC_HD inline void encode_block(const BlockCoding& coding, const float* x, int len, uint64_t index, float row_scale,
                                uint8_t* scale_bytes, uint8_t* code_bytes) {
  const BlockCode code = coding.code;
  const int entries = block_entries(code);
  for (int k = 0; k < block_code_bytes(code); ++k) code_bytes[k] = 0;
  bool finite = true;
  for (int j = 0; j < len; ++j) finite = finite && finite_value(x[j]);
  if (!finite) {  // the whole block NaN, the spec's way (zero codes)
    block_nan_scale(code, scale_bytes);
    return;
  }
  const float magnitude = code == BlockCode::Lm2 || code == BlockCode::Lm3 ? block_rms(x, len) : block_absmax(x, len);
  const float scale = block_scale(code, magnitude, row_scale, scale_bytes);
  const uint64_t hash = coding.stochastic ? block_hash(x, len, entries) : 0;
  PhiloxBlock draw{{0, 0, 0, 0}};
  for (int j = 0; j < len; ++j) {
    if (coding.stochastic && (j & 3) == 0) draw = Philox::block(coding.key, hash, index * uint64_t(entries / 4) + uint64_t(j >> 2));
    uint32_t c;
    if (!(scale > 0.0f)) c = 0;
    else c = block_entry_code(code, x[j] / scale, coding.stochastic, coding.stochastic ? block_random(draw, j) : 0.0f);
    put_code(code, code_bytes, j, c);
  }
}

// The value of one code under its block's decoded scale (a NaN scale: NaN).
OCC_HD inline float block_entry_value(BlockCode code, uint32_t c, float scale) {
  if (code == BlockCode::Mxfp4 || code == BlockCode::Nvfp4) return e2m1_value(c) * scale;
  if (block_code_is_table(code)) return table_level(code, int(c)) * scale;
  const int bits = block_code_bits(code);
  const int q = int(c << (32 - bits)) >> (32 - bits);  // sign-extended
  return float(q) * scale;
}
// The decoded scale of a block from its scale bytes (NaN for the formats' NaN encodings).
OCC_HD inline float block_decoded_scale(BlockCode code, const uint8_t* scale_bytes, float row_scale) {
  if (code == BlockCode::Mxfp4) return scale_bytes[0] == 0xffu ? bits_float(0x7fc00000u) : pow2f(int(scale_bytes[0]) - 127);
  // nvfp4: (code * S) * R, in that order (decode_block); here S (0x7f and 0xff: NaN).
  if (code == BlockCode::Nvfp4) return fp8_e4m3_to_float(scale_bytes[0]);
  return bf16_value(uint16_t(scale_bytes[0] | (uint16_t(scale_bytes[1]) << 8)));
}

OCC_HD inline void decode_block(BlockCode code, const uint8_t* scale_bytes, const uint8_t* code_bytes, float row_scale,
                                float* out, int len) {
  const float scale = block_decoded_scale(code, scale_bytes, row_scale);
  for (int j = 0; j < len; ++j) {
    float v = block_entry_value(code, get_code(code, code_bytes, j), scale);
    if (code == BlockCode::Nvfp4) v = v * row_scale;
    out[j] = v;
  }
}

// nvfp4's row scale from the row's largest finite magnitude.
OCC_HD inline float nvfp4_row_scale(float row_amax) { return row_amax / 2688.0f; }  // 6 * 448

}  // namespace occ::kernels
