#include "compress/block_compressor.h"

#include "core/rng.h"

namespace occ {

BlockCompressor::BlockCompressor(int64_t rows, int64_t cols, kernels::BlockCode code, bool stochastic, uint64_t seed,
                                 uint64_t key, kernels::Ops& ops)
    : StatelessCompressor(rows, cols),
      key_(make_key(seed, key, 0x53524f554e44ull)),
      coding_{code, stochastic, key_},
      ops_(ops) {
  wire::check_shape("block-scaled", rows, cols);
}

void BlockCompressor::set_message_key(uint64_t message) { coding_.key = make_key(key_, message); }

void BlockCompressor::encode(const float* m, float* wire) { ops_.encode_blocks(m, wire, rows_, cols_, coding_); }

void BlockCompressor::decode(const float* wire, float* out) const {
  ops_.decode_blocks(wire, out, rows_, cols_, coding_.code);
}

}  // namespace occ
