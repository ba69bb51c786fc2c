#include "compress/sign_compressor.h"

namespace occ {

SignCompressor::SignCompressor(int64_t rows, int64_t cols, kernels::Ops& ops) : StatelessCompressor(rows, cols), ops_(ops) {
  wire::check_shape("sign", rows, cols);
}

void SignCompressor::encode(const float* m, float* wire) { ops_.encode_signs(m, wire, rows_, cols_); }

void SignCompressor::decode(const float* wire, float* out) const { ops_.decode_signs(wire, out, rows_, cols_); }

}  // namespace occ
