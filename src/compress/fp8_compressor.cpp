#include "compress/fp8_compressor.h"

namespace occ {

Fp8Compressor::Fp8Compressor(int64_t rows, int64_t cols, Fp8Format format, kernels::Ops& ops)
    : StatelessCompressor(rows, cols), format_(format), ops_(ops) {
  wire::check_shape("fp8", rows, cols);
}

void Fp8Compressor::encode(const float* m, float* wire) {
  ops_.encode_scaled_rows(m, wire, rows_, cols_, fp8_row_code(format_));
}

void Fp8Compressor::decode(const float* wire, float* out) const {
  ops_.decode_scaled_rows(wire, out, rows_, cols_, fp8_row_code(format_));
}

}  // namespace occ
