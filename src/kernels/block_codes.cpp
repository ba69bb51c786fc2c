// The CPU's packing of the block compressors' wires (block_codes.h). Rows are
// independent, so the bytes do not depend on the thread count.
#include <algorithm>
#include <cstring>

#include "kernels/kernels.h"

namespace occ::kernels {

void encode_blocks(const float* m, float* wire, int64_t n, int64_t c, const BlockCoding& coding) {
  const BlockCode code = coding.code;
  const int64_t bytes = block_wire_bytes(code, n, c);
  if (bytes > 0) std::memset(wire + words_for_bytes(bytes) - 1, 0, 4);  // the padding after the last code
  const int64_t nb = blocks_per_row(code, c), B = block_entries(code);
  unsigned char* scales = reinterpret_cast<unsigned char*>(wire) + block_scales_offset(code, n);
  unsigned char* codes = reinterpret_cast<unsigned char*>(wire) + block_codes_offset(code, n, c);
#pragma omp parallel for schedule(static) if (n * c >= (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    const float* x = m + i * c;
    float row_scale = 0.0f;
    if (code == BlockCode::Nvfp4) {
      float amax = 0.0f;
      for (int64_t j = 0; j < c; ++j)
        if (finite_value(x[j])) amax = std::fmax(amax, std::fabs(x[j]));
      row_scale = nvfp4_row_scale(amax);
      wire[i] = row_scale;
    }
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t at = i * nb + b;
      encode_block(coding, x + b * B, int(std::min(B, c - b * B)), uint64_t(at), row_scale,
                   scales + at * block_scale_bytes(code), codes + at * block_code_bytes(code));
    }
  }
}

void decode_blocks(const float* wire, float* out, int64_t n, int64_t c, BlockCode code) {
  const int64_t nb = blocks_per_row(code, c), B = block_entries(code);
  const unsigned char* scales = reinterpret_cast<const unsigned char*>(wire) + block_scales_offset(code, n);
  const unsigned char* codes = reinterpret_cast<const unsigned char*>(wire) + block_codes_offset(code, n, c);
#pragma omp parallel for schedule(static) if (n * c >= (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    const float row_scale = code == BlockCode::Nvfp4 ? wire[i] : 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t at = i * nb + b;
      decode_block(code, scales + at * block_scale_bytes(code), codes + at * block_code_bytes(code), row_scale,
                   out + i * c + b * B, int(std::min(B, c - b * B)));
    }
  }
}

}  // namespace occ::kernels
