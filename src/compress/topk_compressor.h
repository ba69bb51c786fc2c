#pragma once
// Top-k sparsification per row: each row sends its k largest-magnitude entries.
//
//   k = max(1, round(fraction * cols))    (at most cols; fraction in (0, 1])
// Selection is by |x| (compared on the fp32 bit pattern without the sign, a
// total order); ties go to the lower column index, so the choice is
// deterministic. Kept entries go out in increasing column order, values exact.
// Decode scatters them into zeros. fraction 1 is lossless.
//
// Two wire formats; the compressor picks the one with fewer words (the same
// for all rows, from the formula alone; a tie picks Indices) and format() says which:
//   Indices: [0, 4*rows*k)             rows*k fp32 values (row i at i*k)
//            [4*rows*k, 8*rows*k)      rows*k int32 column indices
//            bytes = 8*rows*k                   (already whole words)
//   Bitmap:  [0, 4*rows*k)             rows*k fp32 values (row i at i*k)
//            then rows bitmaps of ceil(cols/8) bytes each, row-major; bit j of
//            a row is bit (j % 8) of its byte j / 8 (LSB first); set = kept
//            bytes = 4*rows*k + rows*ceil(cols/8), then zero padding to a word
// Bitmap wins (compared on the padded word totals) about when ceil(cols/8) < 4k,
// i.e. when fraction > ~1/32.
// Stateless; composes with ErrorFeedback (the usual top-k + EF pairing). It
// packs on its Ops' device (kernels/row_codes.h: the same bytes on either backend).
#include "compress/wire.h"
#include "kernels/ops.h"

namespace occ {

enum class TopkFormat { Indices, Bitmap };

inline const char* topk_format_name(TopkFormat f) { return f == TopkFormat::Indices ? "indices" : "bitmap"; }

class TopkCompressor final : public StatelessCompressor {
 public:
  // m, wire and out live on ops' device.
  TopkCompressor(int64_t rows, int64_t cols, double fraction, kernels::Ops& ops = kernels::cpu_ops());
  int64_t k() const { return k_; }
  TopkFormat format() const { return format_; }
  // The two formulas above, before padding.
  static int64_t k_for(int64_t cols, double fraction);
  static int64_t indices_bytes(int64_t rows, int64_t cols, int64_t k) {
    return kernels::topk_code_bytes(rows, cols, k, false);
  }
  static int64_t bitmap_bytes(int64_t rows, int64_t cols, int64_t k) {
    return kernels::topk_code_bytes(rows, cols, k, true);
  }
  int64_t wire_bytes() const {
    return format_ == TopkFormat::Indices ? indices_bytes(rows_, cols_, k_) : bitmap_bytes(rows_, cols_, k_);
  }
  int64_t wire_floats() const override { return wire::words_for_bytes(wire_bytes()); }
  void encode(const float* m, float* wire) override;
  void decode(const float* wire, float* out) const override;

 private:
  int64_t k_;
  TopkFormat format_;
  kernels::Ops& ops_;
};

}  // namespace occ
