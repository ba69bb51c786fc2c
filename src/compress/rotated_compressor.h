#pragma once
// A randomized Hadamard rotation in front of a block codec (--*-comp-rotation
// hadamard[:BLOCK]), a decorator as ErrorFeedback is: encode rotates each row's
// pieces (kernels/hadamard.h: blocks of BLOCK columns, the tail in power-of-two
// pieces, nothing padded) and hands the rotated matrix to the inner codec;
// decode decodes and rotates back. The rotation is orthogonal, so the wire is
// the inner codec's, byte for byte the same size (nothing extra is sent), and
// without quantisation decode(encode(m)) = m up to fp32 rounding.
//
// The random signs are keyed by (seed, key, message): `key` is the link's or
// tensor's (as the inner codec's), `message` what set_message_key last gave
// (the pipeline links: link, iteration, micro-batch and chunk, on both ends;
// DP and DiLoCo: the iteration or the outer step's), so the sender and every
// receiver derive the same signs without a byte on the wire, another message
// draws other signs, and a resumed run draws the same ones again: the
// rotation keeps no state of its own (its key comes from the checkpoint's
// iteration). Error feedback wraps it (the residual is of the unrotated
// message).
#include <memory>

#include "compress/compressor.h"
#include "core/buffer.h"
#include "kernels/ops.h"

namespace occ {

class RotatedCompressor final : public MatrixCompressor {
 public:
  // block: the rotation's block (kernels::rotation_block_ok); the matrices live on ops' device.
  RotatedCompressor(std::unique_ptr<MatrixCompressor> inner, int block, uint64_t seed, uint64_t key,
                    kernels::Ops& ops = kernels::cpu_ops());
  int64_t rows() const override { return inner_->rows(); }
  int64_t cols() const override { return inner_->cols(); }
  int64_t wire_floats() const override { return inner_->wire_floats(); }
  void encode(const float* m, float* wire) override;
  void decode(const float* wire, float* out) const override;
  // The rotation's key becomes (seed, key, message); passed on to the inner codec.
  void set_message_key(uint64_t message) override;
  // The signs' key of the messages from now on (tests: sender and receiver agree).
  uint64_t rotation_key() const { return rotation_key_; }
  int block() const { return block_; }
  bool stateful() const override { return inner_->stateful(); }
  void save_state(TensorFileWriter& w, const std::string& prefix) const override { inner_->save_state(w, prefix); }
  bool load_state(const TensorFileReader& r, const std::string& prefix) override { return inner_->load_state(r, prefix); }

 private:
  std::unique_ptr<MatrixCompressor> inner_;
  int block_;
  uint64_t base_key_, rotation_key_;
  kernels::Ops& ops_;
  DeviceBuffer<float> rotated_;
};

}  // namespace occ
