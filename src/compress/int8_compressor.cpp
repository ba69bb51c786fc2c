#include "compress/int8_compressor.h"

#include <cmath>

namespace occ {

Int8Compressor::Int8Compressor(int64_t rows, int64_t cols) : StatelessCompressor(rows, cols) {
  wire::check_shape("int8", rows, cols);
}

void Int8Compressor::encode(const float* m, float* wire) {
  const int64_t n = rows_, c = cols_;
  wire::clear_tail(wire, wire_floats());
  unsigned char* codes = wire::bytes(wire) + 4 * n;
  // Rows are independent, so the message does not depend on the thread count.
#pragma omp parallel for schedule(static) if (n * c >= (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    const float* x = m + i * c;
    float absmax = 0.0f;
    for (int64_t j = 0; j < c; ++j) absmax = std::fmax(absmax, std::fabs(x[j]));
    const float scale = absmax / 127.0f;
    wire[i] = scale;  // the scale is an fp32 word on the wire: first n words
    unsigned char* row = codes + i * c;
    if (!(scale > 0.0f)) {  // zero row (or NaN/underflow): all codes 0, decodes to 0
      for (int64_t j = 0; j < c; ++j) row[j] = 0;
      continue;
    }
    for (int64_t j = 0; j < c; ++j) {
      // x/scale may exceed 127 by an ulp for the row's absmax: the clamp keeps it a
      // code. NaN has no code: it is sent as 0 (the cast would be undefined).
      float q = std::rint(x[j] / scale);
      q = std::isnan(q) ? 0.0f : std::fmin(127.0f, std::fmax(-127.0f, q));
      row[j] = static_cast<unsigned char>(static_cast<int8_t>(q));
    }
  }
}

void Int8Compressor::decode(const float* wire, float* out) const {
  const int64_t n = rows_, c = cols_;
  const unsigned char* codes = wire::bytes(wire) + 4 * n;
#pragma omp parallel for schedule(static) if (n * c >= (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    const float scale = wire[i];
    for (int64_t j = 0; j < c; ++j) out[i * c + j] = float(static_cast<int8_t>(codes[i * c + j])) * scale;
  }
}

}  // namespace occ
