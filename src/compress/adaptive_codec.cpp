#include "compress/adaptive_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/rng.h"

namespace occ {

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
    for (int64_t b = 0; b < nb; ++b) {
      const float* x = m + i * cols + b * kTile;
      const int64_t len = std::min<int64_t>(kTile, cols - b * kTile);
      double e = 0.0;
      bool finite = true;
      for (int64_t j = 0; j < len; ++j) {
        finite = finite && kernels::finite_value(x[j]);
        e += double(x[j]) * double(x[j]);
      }
      energy[size_t(i * nb + b)] = finite ? e : std::numeric_limits<double>::infinity();
    }
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

namespace {

using kernels::BlockCode;

// One tile of 64 entries (x[0, len), the rest padding) in `code`: kernels::encode_block's
// steps on a block of kTile entries.
void encode_tile(BlockCode code, bool stochastic, uint64_t key, const float* x, int len, uint64_t index,
                 uint8_t* scale_bytes, uint8_t* code_bytes) {
  using namespace kernels;
  const int cb = code == BlockCode::Int4 ? adaptive::kHighCodeBytes : adaptive::kLowCodeBytes;
  std::memset(code_bytes, 0, size_t(cb));
  bool finite = true;
  for (int j = 0; j < len; ++j) finite = finite && finite_value(x[j]);
  if (!finite) {
    block_nan_scale(code, scale_bytes);
    return;
  }
  const float magnitude = code == BlockCode::Lm2 ? block_rms(x, len) : block_absmax(x, len);
  const float scale = block_scale(code, magnitude, 0.0f, scale_bytes);
  const uint64_t hash = stochastic ? block_hash(x, len, adaptive::kTile) : 0;
  PhiloxBlock draw{{0, 0, 0, 0}};
  for (int j = 0; j < len; ++j) {
    if (stochastic && (j & 3) == 0) draw = Philox::block(key, hash, index * uint64_t(adaptive::kTile / 4) + uint64_t(j >> 2));
    const uint32_t c = scale > 0.0f ? block_entry_code(code, x[j] / scale, stochastic, stochastic ? block_random(draw, j) : 0.0f)
                                    : 0u;
    put_code(code, code_bytes, j, c);
  }
}

}  // namespace

AdaptiveCompressor::AdaptiveCompressor(int64_t rows, int64_t cols, double high_fraction, bool stochastic,
                                       uint64_t seed, uint64_t key, kernels::Ops& ops)
    : StatelessCompressor(rows, cols),
      fraction_(high_fraction),
      stochastic_(stochastic),
      base_key_(make_key(seed, key, 0x4144415054ull /* "ADAPT" */)),
      key_(base_key_),
      ops_(ops) {
  wire::check_shape("adaptive", rows, cols);
  OCC_CHECK(high_fraction >= 0.0 && high_fraction <= 1.0,
            "the adaptive codec's high fraction must be in [0, 1] (got {}); pass e.g. 0.125", high_fraction);
}

void AdaptiveCompressor::set_message_key(uint64_t message) { key_ = make_key(base_key_, message); }

void AdaptiveCompressor::encode_host(const float* m, uint8_t* wire) {
  using namespace adaptive;
  const int64_t nb = tiles_per_row(cols_), t_count = rows_ * nb, h = high_tiles(t_count, fraction_);
  const int64_t bytes = wire_bytes(rows_, cols_, fraction_);
  std::memset(wire + 4 * (kernels::words_for_bytes(bytes) - 1), 0, 4);  // the padding after the last code
  const std::vector<uint8_t> high = allocate(m, rows_, cols_, fraction_);
  uint8_t* map = wire;
  std::memset(map, 0, size_t(map_bytes(t_count)));
  uint8_t* scales = wire + map_bytes(t_count);
  uint8_t* high_codes = scales + int64_t(kScaleBytes) * t_count;
  uint8_t* low_codes = high_codes + int64_t(kHighCodeBytes) * h;
  int64_t hi = 0, lo = 0;  // the next high / low tile's place in its section
  for (int64_t t = 0; t < t_count; ++t) {
    const int64_t i = t / nb, b = t % nb;
    const int len = int(std::min<int64_t>(kTile, cols_ - b * kTile));
    const float* x = m + i * cols_ + b * kTile;
    if (high[size_t(t)]) {
      map[t >> 3] = uint8_t(map[t >> 3] | (1u << (t & 7)));
      encode_tile(kHigh, stochastic_, key_, x, len, uint64_t(t), scales + kScaleBytes * t, high_codes + kHighCodeBytes * hi++);
    } else {
      encode_tile(kLow, stochastic_, key_, x, len, uint64_t(t), scales + kScaleBytes * t, low_codes + kLowCodeBytes * lo++);
    }
  }
}

void AdaptiveCompressor::decode_host(const uint8_t* wire, float* out) const {
  using namespace adaptive;
  using namespace kernels;
  const int64_t nb = tiles_per_row(cols_), t_count = rows_ * nb, h = high_tiles(t_count, fraction_);
  const uint8_t* map = wire;
  const uint8_t* scales = wire + map_bytes(t_count);
  const uint8_t* high_codes = scales + int64_t(kScaleBytes) * t_count;
  const uint8_t* low_codes = high_codes + int64_t(kHighCodeBytes) * h;
  int64_t hi = 0, lo = 0;
  for (int64_t t = 0; t < t_count; ++t) {
    const int64_t i = t / nb, b = t % nb;
    const int len = int(std::min<int64_t>(kTile, cols_ - b * kTile));
    const bool is_high = (map[t >> 3] >> (t & 7)) & 1u;
    OCC_CHECK(is_high ? hi < h : lo < t_count - h,
              "corrupt adaptive message: its bit map marks more than {} tiles {}", is_high ? h : t_count - h,
              is_high ? "high" : "low");
    const BlockCode code = is_high ? kHigh : kLow;
    const uint8_t* codes = is_high ? high_codes + kHighCodeBytes * hi++ : low_codes + kLowCodeBytes * lo++;
    const float scale = block_decoded_scale(code, scales + kScaleBytes * t, 0.0f);
    float* y = out + i * cols_ + b * kTile;
    for (int j = 0; j < len; ++j) y[j] = block_entry_value(code, get_code(code, codes, j), scale);
  }
}

void AdaptiveCompressor::encode(const float* m, float* wire) {
  if (ops_.device() == Device::Cpu) return encode_host(m, reinterpret_cast<uint8_t*>(wire));
  host_m_.resize(size_t(rows_ * cols_));
  host_wire_.resize(size_t(wire_floats()));
  device_copy(host_m_.data(), Device::Cpu, m, ops_.device(), host_m_.size() * sizeof(float));
  encode_host(host_m_.data(), reinterpret_cast<uint8_t*>(host_wire_.data()));
  device_copy(wire, ops_.device(), host_wire_.data(), Device::Cpu, host_wire_.size() * sizeof(float));
}

void AdaptiveCompressor::decode(const float* wire, float* out) const {
  if (ops_.device() == Device::Cpu) return decode_host(reinterpret_cast<const uint8_t*>(wire), out);
  host_m_.resize(size_t(rows_ * cols_));
  host_wire_.resize(size_t(wire_floats()));
  device_copy(host_wire_.data(), Device::Cpu, wire, ops_.device(), host_wire_.size() * sizeof(float));
  decode_host(reinterpret_cast<const uint8_t*>(host_wire_.data()), host_m_.data());
  device_copy(out, ops_.device(), host_m_.data(), Device::Cpu, host_m_.size() * sizeof(float));
}

}  // namespace occ
