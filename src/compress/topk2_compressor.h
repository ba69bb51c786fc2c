#pragma once
// Top-k sparsification with 2-bit values (SparseLoCo-like; issue 50 item 5):
// the matrix, read row-major as one vector of n = rows * cols values, is cut
// into chunks of C = kChunk values (the last one shorter where C does not
// divide n); each chunk sends its k largest |values| as a sign and one
// magnitude bit, against two bf16 magnitudes per chunk. Meant to run under
// ErrorFeedback (the residual keeps everything not sent).
//
//   chunk c: len_c values, k_c = clamp(round(density * len_c), 1, len_c)
//   selection: the k_c largest |x| (compared on the fp32 bit pattern without
//     the sign, a total order in which NaN > inf > every finite value); ties go
//     to the lower index, so the choice is deterministic
//   magnitudes: the selected entries ranked by |x| (ties: lower index first);
//     the first floor(k_c / 2) are "high", the rest "low";
//       hi_c = bf16(mean |x| over the high ones)   (0 when there are none)
//       lo_c = bf16(mean |x| over the low ones)
//     (means in double, rounded to the nearest bf16, ties to even): each level
//     is the mean of the magnitudes it stands for, so a chunk's decoded mass
//     equals its selected mass up to the bf16 rounding
//   code (2 bits): bit 0 = sign (1: negative, so -0 sends 1), bit 1 = high
//   decode: x_hat[i] = (sign ? -1 : +1) * (high ? hi_c : lo_c) at the sent
//     indices, 0 elsewhere
//   non-finite: a chunk holding a NaN or an infinity (it is always selected:
//     it sorts above every finite value) sends both magnitudes as bf16 NaN
//     (0x7FC0), so its selected entries decode to NaN and the non-finite guard
//     stops the run as without compression
//
// Wire (bytes), nc = ceil(n / C) chunks, K = sum_c k_c, b = index bits =
// max(1, bit_width(min(C, n) - 1)) (12 for full chunks of 4096):
//   [0, 4*nc)                 per chunk: lo_c, hi_c as little-endian bf16 bits
//   then ceil(K*b / 8) bytes  every chunk's indices (offsets within the chunk,
//                             ascending within a chunk, chunks in order), b bits
//                             each, as ONE bit string, LSB first
//   then ceil(2*K / 8) bytes  the 2-bit codes in the same order, one bit string
//   zero padding to a whole 4-byte word
// bytes = 4*nc + ceil(K*b/8) + ceil(K/4), wire_floats() = ceil(bytes / 4):
// at density 0.02 and full chunks (k = 82 of 4096) 4 + 123 + 20.5 = 147.5 bytes
// per 16,384 fp32 bytes, 0.288 bits per value (111x).
//
// Stateless. The ops of the compressor's device pack it (kernels/topk2_codes.h):
// the CPU's simple twin (kernels/topk2_codes.cpp) and, on the CUDA backend,
// kernels/cuda/topk2_codes.cu, which sends the same bytes and decodes the same
// values (tests/cuda/test_cuda_low_bit_twins.cpp).
#include <algorithm>
#include <cstdint>

#include "compress/wire.h"
#include "kernels/ops.h"
#include "kernels/topk2_codes.h"

namespace occ {

class Topk2Compressor final : public StatelessCompressor {
 public:
  static constexpr int64_t kChunk = kernels::kTopk2Chunk;
  static constexpr double kMaxDensity = 0.25;
  // m, wire and out live on ops' device. density in (0, kMaxDensity].
  Topk2Compressor(int64_t rows, int64_t cols, double density, kernels::Ops& ops = kernels::cpu_ops());
  // The layout above, for a matrix of n values (kernels/topk2_codes.h).
  static int64_t chunks(int64_t n) { return kernels::topk2_chunks(n); }
  static int64_t chunk_len(int64_t n, int64_t c) { return kernels::topk2_chunk_len(n, c); }
  static int64_t k_for(int64_t len, double density) { return kernels::topk2_k(len, density); }
  static int index_bits(int64_t n) { return kernels::topk2_index_bits(n); }
  static int64_t selected(int64_t n, double density) { return kernels::topk2_selected(n, density); }  // K
  static int64_t wire_bytes(int64_t rows, int64_t cols, double density) {
    return kernels::topk2_wire_bytes(rows * cols, density);
  }
  int64_t wire_floats() const override { return wire::words_for_bytes(wire_bytes(rows_, cols_, density_)); }
  void encode(const float* m, float* wire) override;
  void decode(const float* wire, float* out) const override;

 private:
  double density_;
  kernels::Ops& ops_;
};

}  // namespace occ
