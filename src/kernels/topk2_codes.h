#pragma once
// Top-k with 2-bit values: the wire's layout and bit-level helpers
// (compress/topk2_compressor.h states the rule and the layout;
// docs/compression.md), compiled for host and device (OCC_HD) so that the CPU
// (kernels/topk2_codes.cpp) and the GPU (kernels/cuda/topk2_codes.cu) pack
// the same bytes. The matrix is one vector of n values cut into chunks of
// kTopk2Chunk; each chunk sends its k largest |x| (the fp32 bit pattern
// without the sign; ties to the lower index).
#include <cstdint>

#include "core/precision.h"
#include "core/rng.h"  // OCC_HD

namespace occ::kernels {

constexpr int64_t kTopk2Chunk = 4096;
constexpr uint16_t kTopk2Nan = 0x7FC0;  // both magnitudes of a chunk holding a NaN or an infinity

OCC_HD inline int64_t topk2_chunks(int64_t n) { return (n + kTopk2Chunk - 1) / kTopk2Chunk; }
OCC_HD inline int64_t topk2_chunk_len(int64_t n, int64_t c) {
  return n - c * kTopk2Chunk < kTopk2Chunk ? n - c * kTopk2Chunk : kTopk2Chunk;
}
// k = clamp(round(density * len), 1, len).
int64_t topk2_k(int64_t len, double density);
// b = max(1, bit_width(min(C, n) - 1)).
int topk2_index_bits(int64_t n);
// K = sum over chunks of k.
int64_t topk2_selected(int64_t n, double density);
// Bytes before padding: 4 nc + ceil(K b / 8) + ceil(2 K / 8).
int64_t topk2_wire_bytes(int64_t n, double density);
// Where the bit strings start (bytes).
OCC_HD inline int64_t topk2_indices_offset(int64_t n) { return 4 * topk2_chunks(n); }
OCC_HD inline int64_t topk2_codes_offset(int64_t n, int64_t K, int b) { return topk2_indices_offset(n) + (K * b + 7) / 8; }

// The sort key of |x|: the fp32 bits without the sign (NaN > inf > every finite value).
OCC_HD inline uint32_t topk2_magnitude(float x) { return float_bits(x) & 0x7fffffffu; }
// A magnitude level: the mean in double, rounded to the nearest bf16 (0 for no values).
OCC_HD inline uint16_t topk2_level(double sum, int64_t count) {
  return count > 0 ? bf16_bits(float(sum / double(count))) : uint16_t(0);
}
// nbits (<= 32) of a LSB-first bit string at bit position pos.
OCC_HD inline uint32_t topk2_get_bits(const uint8_t* base, int64_t pos, int nbits) {
  uint32_t v = 0;
  for (int j = 0; j < nbits; ++j) v |= uint32_t((base[(pos + j) >> 3] >> ((pos + j) & 7)) & 1u) << j;
  return v;
}
// nbits of v into a zeroed LSB-first bit string at bit position pos (host: one writer).
inline void topk2_put_bits(uint8_t* base, int64_t pos, int nbits, uint32_t v) {
  for (int j = 0; j < nbits; ++j)
    if ((v >> j) & 1u) base[(pos + j) >> 3] |= uint8_t(1u << ((pos + j) & 7));
}
// A selected entry's value: code bit 0 = sign, bit 1 = high.
OCC_HD inline float topk2_value(uint32_t code, float lo, float hi) {
  const float v = (code & 2u) ? hi : lo;
  return (code & 1u) ? -v : v;
}

// The CPU's packing (kernels/topk2_codes.cpp), the GPU's twin's reference:
// m[n] -> wire (topk2_wire_bytes, zero-padded to a whole word), and back.
// Decoding an index outside its chunk throws occ::Error (a corrupt message).
void encode_topk2(const float* m, float* wire, int64_t n, double density);
void decode_topk2(const float* wire, float* out, int64_t n, double density);

}  // namespace occ::kernels
