#include "compress/int8_compressor.h"

namespace occ {

Int8Compressor::Int8Compressor(int64_t rows, int64_t cols, kernels::Ops& ops) : StatelessCompressor(rows, cols), ops_(ops) {
  wire::check_shape("int8", rows, cols);
}

void Int8Compressor::encode(const float* m, float* wire) {
  ops_.encode_scaled_rows(m, wire, rows_, cols_, kernels::RowCode::Int8);
}

void Int8Compressor::decode(const float* wire, float* out) const {
  ops_.decode_scaled_rows(wire, out, rows_, cols_, kernels::RowCode::Int8);
}

}  // namespace occ
