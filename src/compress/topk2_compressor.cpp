#include "compress/topk2_compressor.h"

#include "core/error.h"

namespace occ {

Topk2Compressor::Topk2Compressor(int64_t rows, int64_t cols, double density, kernels::Ops& ops)
    : StatelessCompressor(rows, cols), density_(density), ops_(ops) {
  wire::check_shape("topk2", rows, cols);
  OCC_CHECK(density > 0.0 && density <= kMaxDensity,
            "topk2 density must be in (0, {}] (got {}); pass the share of each chunk's values to send, e.g. 0.02",
            kMaxDensity, density);
}

void Topk2Compressor::encode(const float* m, float* wire) { ops_.encode_topk2(m, wire, rows_ * cols_, density_); }

void Topk2Compressor::decode(const float* wire, float* out) const {
  ops_.decode_topk2(wire, out, rows_ * cols_, density_);
}

}  // namespace occ
