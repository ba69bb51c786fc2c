// The CPU's packing of the byte compressors' wires (row_codes.h). Rows (and
// sign bytes) are independent, so the bytes do not depend on the thread count.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/kernels.h"

namespace occ::kernels {

namespace {
// Zeroes the last 32-bit word of a wire of `bytes` bytes: the padding after the
// last byte stays zero whatever the buffer held.
void clear_last_word(float* wire, int64_t bytes) {
  if (bytes > 0) std::memset(wire + words_for_bytes(bytes) - 1, 0, 4);
}
}  // namespace

void encode_scaled_rows(const float* m, float* wire, int64_t n, int64_t c, RowCode code) {
  clear_last_word(wire, row_code_bytes(n, c));  // the padding after the last code
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


void encode_signs(const float* m, float* wire, int64_t n, int64_t c) {
  const int64_t total = n * c, nbytes = bytes_for_bits(total);
  clear_last_word(wire, sign_code_bytes(n, c));
  unsigned char* bits = reinterpret_cast<unsigned char*>(wire) + 4 * n;
  const bool par = total >= (1 << 16);
#pragma omp parallel for schedule(static) if (par)
  for (int64_t i = 0; i < n; ++i) {
    double sum = 0.0;  // double: the mean of 10^4..10^6 terms stays accurate, and in a fixed order
    for (int64_t j = 0; j < c; ++j) sum += std::isnan(m[i * c + j]) ? 0.0 : std::fabs(double(m[i * c + j]));
    wire[i] = float(sum / double(c));
  }
  // Bits run over row boundaries; each byte is built alone from its 8 entries.
#pragma omp parallel for schedule(static) if (par)
  for (int64_t b = 0; b < nbytes; ++b) {
    unsigned v = 0;
    const int64_t first = 8 * b, last = first + 8 < total ? first + 8 : total;
    for (int64_t p = first; p < last; ++p) v |= unsigned(m[p] < 0.0f) << (p - first);
    bits[b] = static_cast<unsigned char>(v);
  }
}

void decode_signs(const float* wire, float* out, int64_t n, int64_t c) {
  const unsigned char* bits = reinterpret_cast<const unsigned char*>(wire) + 4 * n;
#pragma omp parallel for schedule(static) if (n * c >= (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    const float scale = wire[i];
    for (int64_t j = 0; j < c; ++j) {
      const int64_t p = i * c + j;
      out[p] = ((bits[p >> 3] >> (p & 7)) & 1u) ? -scale : scale;
    }
  }
}

void encode_topk(const float* m, float* wire, int64_t n, int64_t c, int64_t k, bool bitmap) {
  const int64_t map_bytes = bytes_for_bits(c);
  clear_last_word(wire, topk_code_bytes(n, c, k, bitmap));
  unsigned char* tail = reinterpret_cast<unsigned char*>(wire) + 4 * n * k;  // indices or bitmaps
#pragma omp parallel if (n * c >= (1 << 16))
  {
    std::vector<int32_t> order(size_t(c), 0);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const float* x = m + i * c;
      auto before = [x](int32_t a, int32_t b) { return topk_before(float_bits(x[a]), a, float_bits(x[b]), b); };
      for (int64_t j = 0; j < c; ++j) order[size_t(j)] = int32_t(j);
      if (k < c) std::nth_element(order.begin(), order.begin() + k, order.end(), before);
      std::sort(order.begin(), order.begin() + k);  // kept entries in column order
      float* values = wire + i * k;
      for (int64_t t = 0; t < k; ++t) values[t] = x[order[size_t(t)]];
      if (bitmap) {
        unsigned char* map = tail + i * map_bytes;
        std::fill(map, map + map_bytes, static_cast<unsigned char>(0));
        for (int64_t t = 0; t < k; ++t) {
          const int32_t j = order[size_t(t)];
          map[j >> 3] = static_cast<unsigned char>(map[j >> 3] | (1u << (j & 7)));
        }
      } else {
        for (int64_t t = 0; t < k; ++t) std::memcpy(tail + 4 * (i * k + t), &order[size_t(t)], 4);
      }
    }
  }
}

void decode_topk(const float* wire, float* out, int64_t n, int64_t c, int64_t k, bool bitmap) {
  const int64_t map_bytes = bytes_for_bits(c);
  const unsigned char* tail = reinterpret_cast<const unsigned char*>(wire) + 4 * n * k;
#pragma omp parallel for schedule(static) if (n * c >= (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    float* row = out + i * c;
    const float* values = wire + i * k;
    std::fill(row, row + c, 0.0f);
    if (bitmap) {
      const unsigned char* map = tail + i * map_bytes;
      int64_t t = 0;
      for (int64_t j = 0; j < c && t < k; ++j)
        if ((map[j >> 3] >> (j & 7)) & 1u) row[j] = values[t++];
    } else {
      for (int64_t t = 0; t < k; ++t) {
        int32_t j;
        std::memcpy(&j, tail + 4 * (i * k + t), 4);
        if (j >= 0 && j < c) row[j] = values[t];  // a corrupt index must not write out of bounds
      }
    }
  }
}

}  // namespace occ::kernels
