#pragma once
// The randomized Hadamard rotation put in front of a block codec
// (compress/rotated_compressor.h), per piece of a row, compiled for host and
// device (OCC_HD) so both backends (kernels/hadamard.cpp,
// kernels/cuda/hadamard.cu) compute the same bits.
//
// Each row of a rows x cols matrix is cut into pieces: blocks of B = 2^k
// columns (B in [2, 256]), and a tail of t = cols mod B columns cut into the
// powers of two of t's binary digits, largest first (cols 200, B 128: pieces
// of 128, 64 and 8). Nothing is padded, so nothing extra is sent; a tail
// piece of one column is only sign-flipped. A piece x of n values becomes
//   y = H D x / sqrt(n),   and back   x = D H y / sqrt(n),
// H the n x n Sylvester Hadamard matrix (H_ij = (-1)^popcount(i & j)), D a
// diagonal of random signs: orthogonal (it keeps norms), so the inverse is
// exact up to fp32 rounding. It spreads an outlier over its piece and makes
// pieces near Gaussian, which the block codes quantise better.
//
// Signs: entry (row i, column j) is negated when bit j mod 128 of
// Philox(key, i, j / 128)'s 128 bits is set: a function of the key and the
// entry's place only, the same for every block size and on every backend.
// The key (compress/rotated_compressor.h) holds the seed, the link and the
// message (iteration, micro-batch, chunk), so sender and receiver derive it
// without sending anything.
//
// Arithmetic: sign flips (exact), the fast Walsh-Hadamard transform's
// butterflies a + b, a - b in a fixed order (n log2 n additions), then one
// product by 1 / sqrt(n) = 2^-k/2 (k even: exact) or 2^-(k+1)/2 * fp32(sqrt 2)
// (k odd). No product feeds a sum, so no FMA contraction changes the bits.
#include <cstdint>

#include "core/precision.h"
#include "core/rng.h"

namespace occ::kernels {

constexpr int kMaxRotationBlock = 256;

// Is B a rotation block size (a power of two in [2, 256])?
OCC_HD constexpr bool rotation_block_ok(int64_t B) { return B >= 2 && B <= kMaxRotationBlock && (B & (B - 1)) == 0; }

// Pieces of a row of c columns: full blocks of B, then the tail's binary digits.
OCC_HD constexpr int64_t rotation_pieces_per_row(int64_t c, int64_t B) {
  int64_t pieces = c / B;
  for (int64_t t = c % B; t > 0; t &= t - 1) ++pieces;
  return pieces;
}
// Piece p of a row: its first column and its length (a power of two).
OCC_HD inline void rotation_piece(int64_t c, int64_t B, int64_t p, int64_t* start, int* len) {
  const int64_t full = c / B;
  if (p < full) {
    *start = p * B;
    *len = int(B);
    return;
  }
  int64_t at = full * B, t = c % B;
  for (int64_t q = full;; ++q) {
    int64_t top = 1;
    while (top * 2 <= t) top *= 2;  // the largest power of two in t
    if (q == p) {
      *start = at;
      *len = int(top);
      return;
    }
    at += top;
    t -= top;
  }
}

// The sign bits of row `row`'s columns [128 g, 128 g + 128): bit col mod 128 set = negated.
OCC_HD inline PhiloxBlock rotation_sign_bits(uint64_t key, int64_t row, int64_t g) {
  return Philox::block(key, uint64_t(row), uint64_t(g));
}
OCC_HD inline bool rotation_sign_bit(const PhiloxBlock& bits, int64_t col) {
  const int b = int(col & 127);
  return (bits[b >> 5] >> (b & 31)) & 1u;
}
// Is entry (row, col) negated by D?
OCC_HD inline bool rotation_sign_negative(uint64_t key, int64_t row, int64_t col) {
  return rotation_sign_bit(rotation_sign_bits(key, row, col >> 7), col);
}

// 1 / sqrt(n) for n = 2^k, as described above.
OCC_HD inline float rotation_scale(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  const float half_power = bits_float(uint32_t(127 - (k + 1) / 2) << 23);  // 2^-ceil(k/2)
  return (k & 1) ? half_power * 1.41421356237309505f : half_power;
}

// In place: the fast Walsh-Hadamard transform of v[0, n), n a power of two.
OCC_HD inline void fwht(float* v, int n) {
  for (int h = 1; h < n; h *= 2)
    for (int i = 0; i < n; i += 2 * h)
      for (int j = i; j < i + h; ++j) {
        const float a = v[j], b = v[j + h];
        v[j] = a + b;
        v[j + h] = a - b;
      }
}

// One piece: in[0, n) of row `row` starting at column `col0` to out[0, n)
// (in may equal out); forward y = H D x / sqrt(n), inverse x = D H y / sqrt(n).
OCC_HD inline void rotate_piece(const float* in, float* out, int n, uint64_t key, int64_t row, int64_t col0,
                                bool inverse) {
  float v[kMaxRotationBlock];
  // The sign bits, redrawn at each 128-column boundary.
  PhiloxBlock bits = rotation_sign_bits(key, row, col0 >> 7);
  for (int j = 0; j < n; ++j) {
    const int64_t col = col0 + j;
    if (j > 0 && (col & 127) == 0) bits = rotation_sign_bits(key, row, col >> 7);
    const float x = in[j];
    v[j] = !inverse && rotation_sign_bit(bits, col) ? -x : x;
  }
  fwht(v, n);
  const float s = rotation_scale(n);
  bits = rotation_sign_bits(key, row, col0 >> 7);
  for (int j = 0; j < n; ++j) {
    const int64_t col = col0 + j;
    if (j > 0 && (col & 127) == 0) bits = rotation_sign_bits(key, row, col >> 7);
    const float y = v[j] * s;
    out[j] = inverse && rotation_sign_bit(bits, col) ? -y : y;
  }
}

}  // namespace occ::kernels
