#pragma once
// 1-bit (sign) compression with a per-row scale: the 1-bit family of
// signSGD-with-scale / EF-signSGD (Karimireddy et al., 2019) and DeepSpeed's 1-bit Adam.
//
//   scale_i = mean_j |x_ij|               (fp32, accumulated in double)
//   bit_ij  = 1 if x_ij < 0 else 0        (0, -0 and NaN send bit 0, i.e. +scale)
//   x_hat   = bit_ij ? -scale_i : +scale_i
// Why mean |x|: for fixed signs s, the least-squares scale argmin_a ||x - a s||
// is <x, s> / cols = mean |x| (zeros contribute 0 whichever sign they get), so
// ||x - x_hat||^2 = ||x||^2 - cols * scale^2 < ||x||^2 for any non-zero row:
// the contraction that keeps error feedback's residual bounded. (1-bit Adam
// uses the RMS, ||x|| / sqrt(cols), which preserves the norm instead.)
//
// Wire (bytes):
//   [0, 4*rows)                              rows fp32 scales
//   [4*rows, 4*rows + ceil(rows*cols/8))     sign bits of the matrix, packed
//       row-major as ONE bit string (no per-row padding): entry (i, j) is bit
//       p % 8 (LSB first) of byte p / 8, p = i*cols + j
//   zero padding to a whole 4-byte word
// bytes = 4*rows + ceil(rows*cols/8), wire_floats() = ceil(bytes / 4).
// Stateless; meant to run under ErrorFeedback (alone it is biased). It packs
// on its Ops' device (kernels/row_codes.h: the same bytes on either backend).
#include "compress/wire.h"
#include "kernels/ops.h"

namespace occ {

class SignCompressor final : public StatelessCompressor {
 public:
  // m, wire and out live on ops' device.
  SignCompressor(int64_t rows, int64_t cols, kernels::Ops& ops = kernels::cpu_ops());
  static int64_t wire_bytes(int64_t rows, int64_t cols) { return kernels::sign_code_bytes(rows, cols); }
  int64_t wire_floats() const override { return wire::words_for_bytes(wire_bytes(rows_, cols_)); }
  void encode(const float* m, float* wire) override;
  void decode(const float* wire, float* out) const override;

 private:
  kernels::Ops& ops_;
};

}  // namespace occ
