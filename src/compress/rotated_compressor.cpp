#include "compress/rotated_compressor.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/rng.h"

namespace occ {

RotatedCompressor::RotatedCompressor(std::unique_ptr<MatrixCompressor> inner, int block, uint64_t seed, uint64_t key,
                                     kernels::Ops& ops)
    : inner_(std::move(inner)),
      block_(block),
      base_key_(make_key(seed, key, 0x524f544154ull /* "ROTAT" */)),
      rotation_key_(base_key_),
      ops_(ops),
      rotated_(ops.device(), size_t(inner_->rows() * inner_->cols())) {
  OCC_CHECK(kernels::rotation_block_ok(block), "a Hadamard rotation's block must be a power of two from 2 to {}, not {}",
            kernels::kMaxRotationBlock, block);
}

void RotatedCompressor::set_message_key(uint64_t message) {
  rotation_key_ = make_key(base_key_, message);
  inner_->set_message_key(message);
}

void RotatedCompressor::encode(const float* m, float* wire) {
  ops_.rotate_rows(m, rotated_.data(), rows(), cols(), block_, rotation_key_, false);
  inner_->encode(rotated_.data(), wire);
}

void RotatedCompressor::decode(const float* wire, float* out) const {
  inner_->decode(wire, out);
  ops_.rotate_rows(out, out, rows(), cols(), block_, rotation_key_, true);
}

}  // namespace occ
