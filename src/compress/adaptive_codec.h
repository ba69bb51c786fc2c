#pragma once
// Bits where they matter (issue 50, item 3): an adaptive block codec
// (--*-comp-method adaptive) that spends 4 bits per value on the tiles of a
// message that carry the most energy and 2 on the rest, with the bit map of
// its choice on the wire (and counted).
//
// Tiles: each row is cut into tiles of 64 columns (the 2-bit codes' block; a
// last tile the row does not fill is padded, its slots sent and counted as
// the block codecs' are). T = rows * ceil(cols / 64) tiles, tile t = row * nb + b.
//
// The rule (deterministic, from the message alone):
//   energy(t) = sum of x^2 over the tile's entries (in double; a tile holding
//               a NaN or an infinity has energy +inf);
//   H = floor(F * T + 0.5) (F: --*-comp-adaptive-high-fraction, in [0, 1]);
//   the H tiles of the largest energy, ties to the lower tile index, are
//   "high": int4 on 64 entries (integers -7..7 times a bf16 scale
//   s = max |x| / 7 rounded up: 4.25 bits per value); the others are "low":
//   lloydmax2 (the Gaussian's 2-bit Lloyd-Max levels times a bf16 scale s =
//   the tile's RMS rounded up: 2.25 bits per value).
// With per-tile scales a code's error is a fixed share of its tile's energy,
// so the total squared error sum_t energy(t) * err(bits_t) is smallest, for H
// high tiles, when they are the H most energetic: the rule above.
// H depends only on the shape and F, so the wire has a fixed size.
//
// Wire (bytes, in 32-bit words), M = ceil(T / 8), L = T - H:
//   [0, M)                    the bit map: bit t (byte t / 8, bit t % 8) = tile t is high
//   [M, M + 2T)               bf16 scales, one per tile, in tile order
//   [M + 2T, M + 2T + 32H)    the high tiles' 4-bit codes, 32 bytes each, in tile order
//   [.., M + 18T + 16H)       the low tiles' 2-bit codes, 16 bytes each, in tile order
// then zero bytes to a whole word: M + 18T + 16H bytes before that padding,
// 2.25 + 2 H / T + 1 / 64 bits per value when 64 divides cols (and 8 divides T).
// Codes, scales, rounding (to nearest, or stochastic keyed as the block
// codecs' are: (seed, key, message), at the tile's index and a hash of its
// inputs) and non-finite tiles (a bf16 NaN scale: the tile decodes to NaN) are
// kernels/block_codes.h's int4 and lm2, on 64 entries. Stateless.
// The ops of the compressor's device pack it (kernels/adaptive_codes.h): the
// CPU's simple twin (kernels/adaptive_codes.cpp) and, on the CUDA backend,
// kernels/cuda/adaptive_codes.cu, which sends the same bytes and decodes the
// same values (tests/cuda/test_cuda_low_bit_twins.cpp).
#include <cstdint>
#include <vector>

#include "compress/wire.h"
#include "kernels/adaptive_codes.h"
#include "kernels/ops.h"

namespace occ {

// The layout and the rule's helpers: kTile, tiles, high_tiles, map_bytes, wire_bytes, allocate.
namespace adaptive = kernels::adaptive;

class AdaptiveCompressor final : public StatelessCompressor {
 public:
  // m, wire and out live on ops' device. high_fraction in [0, 1].
  AdaptiveCompressor(int64_t rows, int64_t cols, double high_fraction, bool stochastic, uint64_t seed, uint64_t key,
                     kernels::Ops& ops = kernels::cpu_ops());
  int64_t wire_floats() const override { return wire::words_for_bytes(adaptive::wire_bytes(rows_, cols_, fraction_)); }
  void encode(const float* m, float* wire) override;
  void decode(const float* wire, float* out) const override;
  void set_message_key(uint64_t message) override;

 private:
  double fraction_;
  bool stochastic_;
  uint64_t base_key_, key_;
  kernels::Ops& ops_;
};

}  // namespace occ
