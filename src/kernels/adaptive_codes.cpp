// The CPU's packing of the adaptive codec's wire (adaptive_codes.h;
// compress/adaptive_codec.h has the rule and the layout): the simple twin of
// kernels/cuda/adaptive_codes.cu, which sends the same bytes.
#include "kernels/adaptive_codes.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/kernels.h"

namespace occ::kernels {

namespace adaptive {

int64_t high_tiles(int64_t tiles, double high_fraction) {
  return std::min(tiles, int64_t(std::floor(high_fraction * double(tiles) + 0.5)));
}

int64_t wire_bytes(int64_t rows, int64_t cols, double high_fraction) {
  const int64_t t = tiles(rows, cols), h = high_tiles(t, high_fraction);
  return map_bytes(t) + int64_t(kScaleBytes + kLowCodeBytes) * t + int64_t(kHighCodeBytes - kLowCodeBytes) * h;
}

std::vector<uint8_t> allocate(const float* m, int64_t rows, int64_t cols, double high_fraction) {
  const int64_t nb = tiles_per_row(cols), t_count = rows * nb, h = high_tiles(t_count, high_fraction);
  std::vector<double> energy(size_t(t_count), 0.0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t b = 0; b < nb; ++b) energy[size_t(i * nb + b)] = tile_energy(m + i * cols + b * kTile, tile_len(cols, b));
  std::vector<int64_t> order(static_cast<size_t>(t_count));
  for (int64_t t = 0; t < t_count; ++t) order[size_t(t)] = t;
  // A strict total order (energy descending, then index ascending): the same choice on every run.
  auto before = [&energy](int64_t a, int64_t b) {
    return energy[size_t(a)] != energy[size_t(b)] ? energy[size_t(a)] > energy[size_t(b)] : a < b;
  };
  std::vector<uint8_t> high(size_t(t_count), 0);
  if (h > 0) {
    if (h < t_count) std::nth_element(order.begin(), order.begin() + (h - 1), order.end(), before);
    for (int64_t k = 0; k < h; ++k) high[size_t(order[size_t(k)])] = 1;
  }
  return high;
}

}  // namespace adaptive

void encode_adaptive(const float* m, float* wire_words, int64_t rows, int64_t cols, const AdaptiveCoding& coding) {
  using namespace adaptive;
  const int64_t nb = tiles_per_row(cols), t_count = rows * nb, h = high_tiles(t_count, coding.high_fraction);
  const int64_t bytes = wire_bytes(rows, cols, coding.high_fraction);
  if (bytes <= 0) return;
  uint8_t* wire = reinterpret_cast<uint8_t*>(wire_words);
  std::memset(wire + 4 * (words_for_bytes(bytes) - 1), 0, 4);  // the padding after the last code
  const std::vector<uint8_t> high = allocate(m, rows, cols, coding.high_fraction);
  uint8_t* map = wire;
  std::memset(map, 0, size_t(map_bytes(t_count)));
  uint8_t* scales = wire + scales_offset(t_count);
  uint8_t* high_codes = wire + high_codes_offset(t_count);
  uint8_t* low_codes = wire + low_codes_offset(t_count, h);
  int64_t hi = 0, lo = 0;  // the next high / low tile's place in its section
  for (int64_t t = 0; t < t_count; ++t) {
    const int64_t i = t / nb, b = t % nb;
    const float* x = m + i * cols + b * kTile;
    if (high[size_t(t)]) {
      map[t >> 3] = uint8_t(map[t >> 3] | (1u << (t & 7)));
      encode_tile(kHigh, coding.stochastic, coding.key, x, tile_len(cols, b), uint64_t(t), scales + kScaleBytes * t,
                  high_codes + kHighCodeBytes * hi++);
    } else {
      encode_tile(kLow, coding.stochastic, coding.key, x, tile_len(cols, b), uint64_t(t), scales + kScaleBytes * t,
                  low_codes + kLowCodeBytes * lo++);
    }
  }
}

void decode_adaptive(const float* wire_words, float* out, int64_t rows, int64_t cols, double high_fraction) {
  using namespace adaptive;
  const int64_t nb = tiles_per_row(cols), t_count = rows * nb, h = high_tiles(t_count, high_fraction);
  const uint8_t* wire = reinterpret_cast<const uint8_t*>(wire_words);
  const uint8_t* map = wire;
  const uint8_t* scales = wire + scales_offset(t_count);
  const uint8_t* high_codes = wire + high_codes_offset(t_count);
  const uint8_t* low_codes = wire + low_codes_offset(t_count, h);
  int64_t hi = 0, lo = 0;
  for (int64_t t = 0; t < t_count; ++t) {
    const int64_t i = t / nb, b = t % nb;
    const bool is_high = (map[t >> 3] >> (t & 7)) & 1u;
    OCC_CHECK(is_high ? hi < h : lo < t_count - h,
              "corrupt adaptive message: its bit map marks more than {} tiles {}", is_high ? h : t_count - h,
              is_high ? "high" : "low");
    const BlockCode code = is_high ? kHigh : kLow;
    const uint8_t* codes = is_high ? high_codes + kHighCodeBytes * hi++ : low_codes + kLowCodeBytes * lo++;
    decode_tile(code, scales + kScaleBytes * t, codes, out + i * cols + b * kTile, tile_len(cols, b));
  }
}

}  // namespace occ::kernels
