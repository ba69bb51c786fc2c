#pragma once
// The adaptive codec's wire (compress/adaptive_codec.h states the rule and the
// layout; docs/block-codecs.md): the layout, the per-tile energy and the per-tile
// coding, compiled for host and device (OCC_HD) so that the CPU
// (kernels/adaptive_codes.cpp) and the GPU (kernels/cuda/adaptive_codes.cu)
// pack the same bytes from the same functions. A tile is 64 entries of one
// row; its codes, scales and rounding are block_codes.h's int4 (high) and lm2
// (low) on 64 entries, keyed at the tile's index.
#include <cstdint>
#include <vector>

#include "core/rng.h"  // OCC_HD
#include "kernels/block_codes.h"

namespace occ::kernels {

// What the encoder of a message needs besides the matrix.
struct AdaptiveCoding {
  double high_fraction = 0.0;  // F in [0, 1]
  bool stochastic = false;     // stochastic rounding (else to nearest)
  uint64_t key = 0;            // the Philox key of the rounding bits
};

namespace adaptive {

constexpr int kTile = 64;
constexpr BlockCode kHigh = BlockCode::Int4, kLow = BlockCode::Lm2;
constexpr int kHighCodeBytes = kTile * 4 / 8, kLowCodeBytes = kTile * 2 / 8, kScaleBytes = 2;
OCC_HD inline int64_t tiles_per_row(int64_t cols) { return (cols + kTile - 1) / kTile; }
OCC_HD inline int64_t tiles(int64_t rows, int64_t cols) { return rows * tiles_per_row(cols); }
// H = floor(F * T + 0.5), at most T.
int64_t high_tiles(int64_t tiles, double high_fraction);
OCC_HD inline int64_t map_bytes(int64_t tiles) { return (tiles + 7) / 8; }
// Bytes of the wire before padding to a whole word.
int64_t wire_bytes(int64_t rows, int64_t cols, double high_fraction);
// Where the sections start (bytes): scales, then the high tiles' codes, then the low tiles'.
OCC_HD inline int64_t scales_offset(int64_t tiles) { return map_bytes(tiles); }
OCC_HD inline int64_t high_codes_offset(int64_t tiles) { return scales_offset(tiles) + int64_t(kScaleBytes) * tiles; }
OCC_HD inline int64_t low_codes_offset(int64_t tiles, int64_t high) {
  return high_codes_offset(tiles) + int64_t(kHighCodeBytes) * high;
}
// Entries of tile b of a row of `cols` (the last one may be short).
OCC_HD inline int tile_len(int64_t cols, int64_t b) { return int(cols - b * kTile < kTile ? cols - b * kTile : kTile); }

// The energy of a tile: sum x^2 in double in entry order (a float's square is
// exact in double, so an FMA gives the same sum); +inf for a tile holding a NaN or an infinity.
OCC_HD inline double tile_energy(const float* x, int len) {
  double e = 0.0;
  bool finite = true;
  for (int j = 0; j < len; ++j) {
    finite = finite && finite_value(x[j]);
    e += double(x[j]) * double(x[j]);
  }
  return finite ? e : double(bits_float(0x7f800000u));  // +inf
}

// One tile of 64 entries (x[0, len), the rest padding) in `code` (kHigh or
// kLow): kernels::encode_block's steps on a block of kTile entries.
// index: the tile's index t (the Philox counter, as a block's).
OCC_HD inline void encode_tile(BlockCode code, bool stochastic, uint64_t key, const float* x, int len, uint64_t index,
                               uint8_t* scale_bytes, uint8_t* code_bytes) {
  const int cb = code == BlockCode::Int4 ? kHighCodeBytes : kLowCodeBytes;
  for (int k = 0; k < cb; ++k) code_bytes[k] = 0;
  bool finite = true;
  for (int j = 0; j < len; ++j) finite = finite && finite_value(x[j]);
  if (!finite) {
    block_nan_scale(code, scale_bytes);
    return;
  }
  const float magnitude = code == BlockCode::Lm2 ? block_rms(x, len) : block_absmax(x, len);
  const float scale = block_scale(code, magnitude, 0.0f, scale_bytes);
  const uint64_t hash = stochastic ? block_hash(x, len, kTile) : 0;
  PhiloxBlock draw{{0, 0, 0, 0}};
  for (int j = 0; j < len; ++j) {
    if (stochastic && (j & 3) == 0) draw = Philox::block(key, hash, index * uint64_t(kTile / 4) + uint64_t(j >> 2));
    const uint32_t c =
        scale > 0.0f ? block_entry_code(code, x[j] / scale, stochastic, stochastic ? block_random(draw, j) : 0.0f) : 0u;
    put_code(code, code_bytes, j, c);
  }
}

// The values of one tile (len entries) from its scale bytes and codes.
OCC_HD inline void decode_tile(BlockCode code, const uint8_t* scale_bytes, const uint8_t* code_bytes, float* y,
                               int len) {
  const float scale = block_decoded_scale(code, scale_bytes, 0.0f);
  for (int j = 0; j < len; ++j) y[j] = block_entry_value(code, get_code(code, code_bytes, j), scale);
}

// The tiles chosen high (1) or low (0) for m[n x c] on the CPU: the H of the
// largest energy, ties to the lower index.
std::vector<uint8_t> allocate(const float* m, int64_t n, int64_t c, double high_fraction);

}  // namespace adaptive

// The CPU's packing (kernels/adaptive_codes.cpp), the GPU's twin's reference:
// m[n, c] -> wire (adaptive::wire_bytes, zero-padded to a whole word), and back.
// Decoding a bit map that does not mark H tiles high throws occ::Error.
void encode_adaptive(const float* m, float* wire, int64_t n, int64_t c, const AdaptiveCoding& coding);
void decode_adaptive(const float* wire, float* out, int64_t n, int64_t c, double high_fraction);

}  // namespace occ::kernels
