#pragma once
// Block-scaled 3- and 4-bit compression: mxfp4 (OCP MX v1.0), nvfp4 (NVIDIA),
// int4 and int3 with a bf16 scale per block (the formats, their rounding and
// their wires: kernels/block_codes.h).
//
//   bytes (before padding to a whole 4-byte word), nb = ceil(cols / B):
//     mxfp4  17 * rows * nb          (B = 32: 4.25 bits per value)
//     nvfp4  4 * rows + 9 * rows * nb (B = 16: 4.5 bits per value + 32 per row)
//     int4   18 * rows * nb          (B = 32: 4.5 bits per value)
//     int3   14 * rows * nb          (B = 32: 3.5 bits per value)
//   the padding of a last block that cols does not fill included.
//
// Rounding to nearest (ties to even) or stochastic; the stochastic bits come
// from Philox keyed by (seed, key) and, on the pipeline links, the message
// (set_message_key: link, step, micro-batch) (block_codes.h: at a counter made
// of the block's position and a hash of its inputs), so both backends, and a
// resumed run, round alike, and the compressor keeps no state. Composes with
// ErrorFeedback (LEP on pp_bwd, EF on DP). A block holding a non-finite entry
// decodes to NaN (block_codes.h: the scale format's NaN), so the non-finite
// guard stops the run as without compression.
// It packs on its Ops' device (the CPU and CUDA kernels send the same bytes).
#include "compress/wire.h"
#include "kernels/ops.h"

namespace occ {

class BlockCompressor final : public StatelessCompressor {
 public:
  // m, wire and out live on ops' device.
  BlockCompressor(int64_t rows, int64_t cols, kernels::BlockCode code, bool stochastic, uint64_t seed, uint64_t key,
                  kernels::Ops& ops = kernels::cpu_ops());
  static int64_t wire_bytes(kernels::BlockCode code, int64_t rows, int64_t cols) {
    return kernels::block_wire_bytes(code, rows, cols);
  }
  int64_t wire_floats() const override { return wire::words_for_bytes(wire_bytes(coding_.code, rows_, cols_)); }
  void encode(const float* m, float* wire) override;
  void decode(const float* wire, float* out) const override;
  // Stochastic rounding's key becomes (the compressor's key, message).
  void set_message_key(uint64_t message) override;

 private:
  uint64_t key_;  // (seed, key): the rounding bits' key until a message key is set
  kernels::BlockCoding coding_;
  kernels::Ops& ops_;
};

}  // namespace occ
