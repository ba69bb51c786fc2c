#include "compress/sign_compressor.h"

#include <cmath>

namespace occ {

SignCompressor::SignCompressor(int64_t rows, int64_t cols) : StatelessCompressor(rows, cols) {
  wire::check_shape("sign", rows, cols);
}

void SignCompressor::encode(const float* m, float* wire) {
  const int64_t n = rows_, c = cols_, total = n * c, nbytes = wire::bytes_for_bits(total);
  wire::clear_tail(wire, wire_floats());
  unsigned char* bits = wire::bytes(wire) + 4 * n;
  const bool par = total >= (1 << 16);
#pragma omp parallel for schedule(static) if (par)
  for (int64_t i = 0; i < n; ++i) {
    double sum = 0.0;  // double: the mean of 10^4..10^6 terms stays accurate, and in a fixed order
    for (int64_t j = 0; j < c; ++j) sum += std::isnan(m[i * c + j]) ? 0.0 : std::fabs(double(m[i * c + j]));
    wire[i] = float(sum / double(c));
  }
  // Bits run over row boundaries; each byte is built alone from its 8 entries,
  // so bytes can be filled in parallel without sharing.
#pragma omp parallel for schedule(static) if (par)
  for (int64_t b = 0; b < nbytes; ++b) {
    unsigned v = 0;
    const int64_t first = 8 * b, last = first + 8 < total ? first + 8 : total;
    for (int64_t p = first; p < last; ++p) v |= unsigned(m[p] < 0.0f) << (p - first);
    bits[b] = static_cast<unsigned char>(v);
  }
}

void SignCompressor::decode(const float* wire, float* out) const {
  const int64_t n = rows_, c = cols_;
  const unsigned char* bits = wire::bytes(wire) + 4 * n;
#pragma omp parallel for schedule(static) if (n * c >= (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    const float scale = wire[i];
    for (int64_t j = 0; j < c; ++j) {
      const int64_t p = i * c + j;
      out[p] = ((bits[p >> 3] >> (p & 7)) & 1u) ? -scale : scale;
    }
  }
}

}  // namespace occ
