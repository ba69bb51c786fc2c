#include "compress/fp8_compressor.h"

#include <cmath>

#include "core/precision.h"

namespace occ {

Fp8Compressor::Fp8Compressor(int64_t rows, int64_t cols, Fp8Format format)
    : StatelessCompressor(rows, cols), format_(format) {
  wire::check_shape("fp8", rows, cols);
}

void Fp8Compressor::encode(const float* m, float* wire) {
  // v may exceed the largest finite value by an ulp for the row's absmax: the
  // conversions saturate.
  if (format_ == Fp8Format::E4M3)
    wire::encode_scaled_rows(m, wire, rows_, cols_, wire_floats(), fp8_max_finite(format_), float_to_fp8_e4m3);
  else
    wire::encode_scaled_rows(m, wire, rows_, cols_, wire_floats(), fp8_max_finite(format_), float_to_fp8_e5m2);
}

void Fp8Compressor::decode(const float* wire, float* out) const {
  if (format_ == Fp8Format::E4M3)
    wire::decode_scaled_rows(wire, out, rows_, cols_, fp8_e4m3_to_float);
  else
    wire::decode_scaled_rows(wire, out, rows_, cols_, fp8_e5m2_to_float);
}

}  // namespace occ
