#include "compress/fp8_compressor.h"

#include <cmath>

#include "core/precision.h"

namespace occ {

Fp8Compressor::Fp8Compressor(int64_t rows, int64_t cols, Fp8Format format)
    : StatelessCompressor(rows, cols), format_(format) {
  wire::check_shape("fp8", rows, cols);
}

void Fp8Compressor::encode(const float* m, float* wire) {
  const int64_t n = rows_, c = cols_;
  const bool e4m3 = format_ == Fp8Format::E4M3;
  const float top = fp8_max_finite(format_);
  wire::clear_tail(wire, wire_floats());
  unsigned char* codes = wire::bytes(wire) + 4 * n;
  // Rows are independent, so the message does not depend on the thread count.
#pragma omp parallel for schedule(static) if (n * c >= (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    const float* x = m + i * c;
    float absmax = 0.0f;
    for (int64_t j = 0; j < c; ++j) absmax = std::fmax(absmax, std::fabs(x[j]));
    const float scale = absmax / top;
    wire[i] = scale;
    unsigned char* row = codes + i * c;
    if (!(scale > 0.0f)) {  // zero row (or an absmax that underflows): all codes +0
      for (int64_t j = 0; j < c; ++j) row[j] = 0;
      continue;
    }
    for (int64_t j = 0; j < c; ++j) {
      // x/scale may exceed max by an ulp for the row's absmax: the conversion saturates.
      const float v = std::isnan(x[j]) ? 0.0f : x[j] / scale;
      row[j] = e4m3 ? float_to_fp8_e4m3(v) : float_to_fp8_e5m2(v);
    }
  }
}

void Fp8Compressor::decode(const float* wire, float* out) const {
  const int64_t n = rows_, c = cols_;
  const bool e4m3 = format_ == Fp8Format::E4M3;
  const unsigned char* codes = wire::bytes(wire) + 4 * n;
#pragma omp parallel for schedule(static) if (n * c >= (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    const float scale = wire[i];
    for (int64_t j = 0; j < c; ++j) {
      const uint8_t code = codes[i * c + j];
      out[i * c + j] = (e4m3 ? fp8_e4m3_to_float(code) : fp8_e5m2_to_float(code)) * scale;
    }
  }
}

}  // namespace occ
