#include "compress/topk_compressor.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/precision.h"

namespace occ {

int64_t TopkCompressor::k_for(int64_t cols, double fraction) {
  const auto k = static_cast<int64_t>(std::llround(fraction * double(cols)));
  return std::clamp<int64_t>(k, 1, cols);
}

TopkCompressor::TopkCompressor(int64_t rows, int64_t cols, double fraction) : StatelessCompressor(rows, cols) {
  wire::check_shape("topk", rows, cols);
  OCC_CHECK(fraction > 0.0 && fraction <= 1.0,
            "topk fraction must be in (0, 1] (got {}); pass the share of each row's entries to send, e.g. 0.01",
            fraction);
  k_ = k_for(cols, fraction);
  const int64_t iw = wire::words_for_bytes(indices_bytes(rows, cols, k_));
  const int64_t bw = wire::words_for_bytes(bitmap_bytes(rows, cols, k_));
  format_ = bw < iw ? TopkFormat::Bitmap : TopkFormat::Indices;
}

void TopkCompressor::encode(const float* m, float* wire) {
  const int64_t n = rows_, c = cols_, k = k_;
  const bool bitmap = format_ == TopkFormat::Bitmap;
  const int64_t map_bytes = wire::bytes_for_bits(c);
  wire::clear_tail(wire, wire_floats());
  unsigned char* tail = wire::bytes(wire) + 4 * n * k;  // indices or bitmaps, after the values
#pragma omp parallel if (n * c >= (1 << 16))
  {
    std::vector<int32_t> order(size_t(c), 0);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const float* x = m + i * c;
      // |x| as its bit pattern: a total order on magnitudes (NaN above infinity),
      // so selection is well defined whatever the data; ties by lower column.
      auto larger = [x](int32_t a, int32_t b) {
        const uint32_t ma = float_bits(x[a]) & 0x7fffffffu, mb = float_bits(x[b]) & 0x7fffffffu;
        return ma != mb ? ma > mb : a < b;
      };
      for (int64_t j = 0; j < c; ++j) order[size_t(j)] = int32_t(j);
      if (k < c) std::nth_element(order.begin(), order.begin() + k, order.end(), larger);
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
        for (int64_t t = 0; t < k; ++t) wire::put_i32(tail + 4 * (i * k + t), order[size_t(t)]);
      }
    }
  }
}

void TopkCompressor::decode(const float* wire, float* out) const {
  const int64_t n = rows_, c = cols_, k = k_;
  const int64_t map_bytes = wire::bytes_for_bits(c);
  const unsigned char* tail = wire::bytes(wire) + 4 * n * k;
#pragma omp parallel for schedule(static) if (n * c >= (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    float* row = out + i * c;
    const float* values = wire + i * k;
    std::fill(row, row + c, 0.0f);
    if (format_ == TopkFormat::Bitmap) {
      const unsigned char* map = tail + i * map_bytes;
      int64_t t = 0;
      for (int64_t j = 0; j < c && t < k; ++j)
        if ((map[j >> 3] >> (j & 7)) & 1u) row[j] = values[t++];
    } else {
      for (int64_t t = 0; t < k; ++t) {
        const int32_t j = wire::get_i32(tail + 4 * (i * k + t));
        if (j >= 0 && j < c) row[j] = values[t];  // a corrupt index must not write out of bounds
      }
    }
  }
}

}  // namespace occ
