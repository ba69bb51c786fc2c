#pragma once
// int8 quantisation with a per-row absmax scale.
//
//   scale_i = max_j |x_ij| / 127          (fp32; a row of zeros has scale 0)
//   code_ij = rint(x_ij / scale_i)        (round to nearest, ties to even; in [-127, 127])
//   x_hat   = code_ij * scale_i
// so |x - x_hat| <= scale_i / 2 per entry (plus fp32 rounding of the division
// and the product). -128 is never used: the code range is symmetric. NaN
// entries are sent as 0 and do not enter the absmax (gradients are finite
// here: the loss scaler skips steps with non-finite gradients).
//
// Wire (bytes, row-major):
//   [0, 4*rows)                   rows fp32 scales
//   [4*rows, 4*rows + rows*cols)  int8 codes, row-major
//   zero padding to a whole 4-byte word
// bytes = 4*rows + rows*cols, wire_floats() = ceil(bytes / 4).
// Stateless; composes with ErrorFeedback. It packs on its Ops' device (the
// CPU and CUDA kernels of kernels/row_codes.h send the same bytes).
#include "compress/wire.h"
#include "kernels/ops.h"

namespace occ {

class Int8Compressor final : public StatelessCompressor {
 public:
  // m, wire and out live on ops' device.
  Int8Compressor(int64_t rows, int64_t cols, kernels::Ops& ops = kernels::cpu_ops());
  // The formula above, before padding.
  static int64_t wire_bytes(int64_t rows, int64_t cols) { return kernels::row_code_bytes(rows, cols); }
  int64_t wire_floats() const override { return wire::words_for_bytes(wire_bytes(rows_, cols_)); }
  void encode(const float* m, float* wire) override;
  void decode(const float* wire, float* out) const override;

 private:
  kernels::Ops& ops_;
};

}  // namespace occ
