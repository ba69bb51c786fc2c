#include "compress/topk_compressor.h"

#include <algorithm>
#include <cmath>

namespace occ {

int64_t TopkCompressor::k_for(int64_t cols, double fraction) {
  const auto k = static_cast<int64_t>(std::llround(fraction * double(cols)));
  return std::clamp<int64_t>(k, 1, cols);
}

TopkCompressor::TopkCompressor(int64_t rows, int64_t cols, double fraction, kernels::Ops& ops)
    : StatelessCompressor(rows, cols), ops_(ops) {
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
  ops_.encode_topk(m, wire, rows_, cols_, k_, format_ == TopkFormat::Bitmap);
}

void TopkCompressor::decode(const float* wire, float* out) const {
  ops_.decode_topk(wire, out, rows_, cols_, k_, format_ == TopkFormat::Bitmap);
}

}  // namespace occ
