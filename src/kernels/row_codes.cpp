// The CPU's packing of one-byte codes with a per-row scale (row_codes.h).
// Rows are independent, so the bytes do not depend on the thread count.
#include <cstring>

#include "kernels/kernels.h"

namespace occ::kernels {

void encode_scaled_rows(const float* m, float* wire, int64_t n, int64_t c, RowCode code) {
  const int64_t bytes = row_code_bytes(n, c), words = (bytes + 3) / 4;
  std::memset(wire + (words - 1), 0, 4);  // the padding after the last code
  const float top = row_code_top(code);
  unsigned char* codes = reinterpret_cast<unsigned char*>(wire) + 4 * n;
#pragma omp parallel for schedule(static) if (n * c >= (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    const float* x = m + i * c;
    float absmax = 0.0f;
    for (int64_t j = 0; j < c; ++j) absmax = std::fmax(absmax, std::fabs(x[j]));
    const float scale = absmax / top;
    wire[i] = scale;
    unsigned char* row = codes + i * c;
    for (int64_t j = 0; j < c; ++j) row[j] = scale > 0.0f ? row_encode(code, std::isnan(x[j]) ? 0.0f : x[j] / scale) : 0;
  }
}

void decode_scaled_rows(const float* wire, float* out, int64_t n, int64_t c, RowCode code) {
  const unsigned char* codes = reinterpret_cast<const unsigned char*>(wire) + 4 * n;
#pragma omp parallel for schedule(static) if (n * c >= (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    const float scale = wire[i];
    for (int64_t j = 0; j < c; ++j) out[i * c + j] = row_decode(code, codes[i * c + j]) * scale;
  }
}

}  // namespace occ::kernels
