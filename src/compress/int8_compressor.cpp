#include "compress/int8_compressor.h"

#include <cmath>

namespace occ {

Int8Compressor::Int8Compressor(int64_t rows, int64_t cols) : StatelessCompressor(rows, cols) {
  wire::check_shape("int8", rows, cols);
}

void Int8Compressor::encode(const float* m, float* wire) {
  wire::encode_scaled_rows(m, wire, rows_, cols_, wire_floats(), 127.0f, [](float v) {
    // v may exceed 127 by an ulp for the row's absmax: the clamp keeps it a code.
    // An infinite absmax makes v NaN, which has no code: it is sent as 0.
    float q = std::rint(v);
    q = std::isnan(q) ? 0.0f : std::fmin(127.0f, std::fmax(-127.0f, q));
    return static_cast<unsigned char>(static_cast<int8_t>(q));
  });
}

void Int8Compressor::decode(const float* wire, float* out) const {
  wire::decode_scaled_rows(wire, out, rows_, cols_, [](unsigned char code) { return float(static_cast<int8_t>(code)); });
}

}  // namespace occ
