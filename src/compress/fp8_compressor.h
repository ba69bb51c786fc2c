#pragma once
// fp8 quantisation (OCP E4M3FN or E5M2, core/precision.h) with a per-row scale.
//
//   scale_i = max_j |x_ij| / max_finite   (448 for E4M3, 57344 for E5M2; fp32;
//                                          a row of zeros has scale 0)
//   code_ij = fp8(x_ij / scale_i)         (round to nearest even, saturating)
//   x_hat   = fp8_to_float(code_ij) * scale_i
// The row's largest magnitude lands on the largest code, so the whole fp8
// range (and its relative precision, 2^-4 for E4M3, 2^-3 for E5M2) is used.
// NaN entries are sent as 0 and do not enter the absmax.
//
// Wire (bytes, row-major), the same layout as int8:
//   [0, 4*rows)                   rows fp32 scales
//   [4*rows, 4*rows + rows*cols)  fp8 codes, row-major
//   zero padding to a whole 4-byte word
// bytes = 4*rows + rows*cols, wire_floats() = ceil(bytes / 4).
// Stateless; composes with ErrorFeedback. It packs on its Ops' device (the
// CPU and CUDA kernels of kernels/row_codes.h send the same bytes).
#include "compress/wire.h"
#include "kernels/ops.h"

namespace occ {

enum class Fp8Format { E4M3, E5M2 };

inline const char* fp8_format_name(Fp8Format f) { return f == Fp8Format::E4M3 ? "e4m3" : "e5m2"; }
// The format's code in the shared packing (kernels/row_codes.h).
inline kernels::RowCode fp8_row_code(Fp8Format f) {
  return f == Fp8Format::E4M3 ? kernels::RowCode::Fp8E4M3 : kernels::RowCode::Fp8E5M2;
}
// The largest finite value of the format.
inline float fp8_max_finite(Fp8Format f) { return kernels::row_code_top(fp8_row_code(f)); }

class Fp8Compressor final : public StatelessCompressor {
 public:
  // m, wire and out live on ops' device.
  Fp8Compressor(int64_t rows, int64_t cols, Fp8Format format, kernels::Ops& ops = kernels::cpu_ops());
  Fp8Format format() const { return format_; }
  static int64_t wire_bytes(int64_t rows, int64_t cols) { return kernels::row_code_bytes(rows, cols); }
  int64_t wire_floats() const override { return wire::words_for_bytes(wire_bytes(rows_, cols_)); }
  void encode(const float* m, float* wire) override;
  void decode(const float* wire, float* out) const override;

 private:
  Fp8Format format_;
  kernels::Ops& ops_;
};

}  // namespace occ
