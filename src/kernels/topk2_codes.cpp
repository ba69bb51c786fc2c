// The CPU's packing of top-k with 2-bit values (topk2_codes.h;
// compress/topk2_compressor.h has the rule and the layout): the simple twin of
// kernels/cuda/topk2_codes.cu, which sends the same bytes.
#include "kernels/topk2_codes.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>
#include <utility>
#include <vector>

#include "core/error.h"
#include "kernels/kernels.h"

namespace occ::kernels {

int64_t topk2_k(int64_t len, double density) {
  return std::clamp<int64_t>(std::llround(density * double(len)), 1, len);
}

int topk2_index_bits(int64_t n) {
  return std::max(1, int(std::bit_width(uint64_t(std::min(kTopk2Chunk, n) - 1))));
}

int64_t topk2_selected(int64_t n, double density) {
  int64_t K = 0;
  for (int64_t c = 0; c < topk2_chunks(n); ++c) K += topk2_k(topk2_chunk_len(n, c), density);
  return K;
}

int64_t topk2_wire_bytes(int64_t n, double density) {
  const int64_t K = topk2_selected(n, density);
  return 4 * topk2_chunks(n) + (K * topk2_index_bits(n) + 7) / 8 + (2 * K + 7) / 8;
}

void encode_topk2(const float* m, float* wire_words, int64_t n, double density) {
  const int64_t nc = topk2_chunks(n), K = topk2_selected(n, density);
  const int b = topk2_index_bits(n);
  uint8_t* wire = reinterpret_cast<uint8_t*>(wire_words);
  std::memset(wire, 0, size_t(words_for_bytes(topk2_wire_bytes(n, density))) * 4);
  uint8_t* indices = wire + topk2_indices_offset(n);
  uint8_t* codes = wire + topk2_codes_offset(n, K, b);
  std::vector<int32_t> order;
  std::vector<std::pair<int32_t, uint32_t>> sent;  // (index, code), by index
  int64_t pos = 0;
  for (int64_t c = 0; c < nc; ++c) {
    const float* x = m + c * kTopk2Chunk;
    const int64_t len = topk2_chunk_len(n, c), k = topk2_k(len, density);
    order.resize(size_t(len));
    std::iota(order.begin(), order.end(), 0);
    auto mag = [x](int32_t i) { return topk2_magnitude(x[i]); };
    auto before = [&mag](int32_t a, int32_t b) {  // larger |x| first, then the lower index
      const uint32_t ma = mag(a), mb = mag(b);
      return ma != mb ? ma > mb : a < b;
    };
    if (k < len) std::nth_element(order.begin(), order.begin() + k, order.end(), before);
    std::sort(order.begin(), order.begin() + k, before);
    const int64_t high = k / 2;
    double sum_hi = 0, sum_lo = 0;  // in rank order (the GPU sums in the same order)
    bool finite = true;
    sent.clear();
    for (int64_t r = 0; r < k; ++r) {
      const int32_t i = order[size_t(r)];
      finite &= mag(i) < 0x7f800000u;
      (r < high ? sum_hi : sum_lo) += std::fabs(double(x[i]));
      sent.emplace_back(i, (std::signbit(x[i]) ? 1u : 0u) | (r < high ? 2u : 0u));
    }
    const uint16_t lo = finite ? topk2_level(sum_lo, k - high) : kTopk2Nan;
    const uint16_t hi = finite ? topk2_level(sum_hi, high) : kTopk2Nan;
    const uint8_t scale[4] = {uint8_t(lo & 0xff), uint8_t(lo >> 8), uint8_t(hi & 0xff), uint8_t(hi >> 8)};
    std::memcpy(wire + 4 * c, scale, 4);
    std::sort(sent.begin(), sent.end());
    for (const auto& entry : sent) {
      topk2_put_bits(indices, pos * b, b, uint32_t(entry.first));
      topk2_put_bits(codes, pos * 2, 2, entry.second);
      ++pos;
    }
  }
}

void decode_topk2(const float* wire_words, float* out, int64_t n, double density) {
  const int64_t nc = topk2_chunks(n), K = topk2_selected(n, density);
  const int b = topk2_index_bits(n);
  const uint8_t* wire = reinterpret_cast<const uint8_t*>(wire_words);
  const uint8_t* indices = wire + topk2_indices_offset(n);
  const uint8_t* codes = wire + topk2_codes_offset(n, K, b);
  std::fill(out, out + n, 0.0f);
  int64_t pos = 0;
  for (int64_t c = 0; c < nc; ++c) {
    const int64_t len = topk2_chunk_len(n, c), k = topk2_k(len, density);
    const float lo = bf16_value(uint16_t(wire[4 * c] | (wire[4 * c + 1] << 8)));
    const float hi = bf16_value(uint16_t(wire[4 * c + 2] | (wire[4 * c + 3] << 8)));
    for (int64_t r = 0; r < k; ++r, ++pos) {
      const uint32_t i = topk2_get_bits(indices, pos * b, b), code = topk2_get_bits(codes, pos * 2, 2);
      OCC_CHECK(i < uint32_t(len), "topk2: index {} outside its chunk of {} values (a corrupt message)", i, len);
      out[c * kTopk2Chunk + i] = topk2_value(code, lo, hi);
    }
  }
}

}  // namespace occ::kernels
