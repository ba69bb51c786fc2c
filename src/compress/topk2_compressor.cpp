#include "compress/topk2_compressor.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/device.h"
#include "core/precision.h"

namespace occ {
namespace {

constexpr uint16_t kTopk2Nan = 0x7FC0;

// nbits of v at bit position pos of a zeroed LSB-first bit string.
void topk2_put_bits(uint8_t* base, int64_t pos, int nbits, uint32_t v) {
  for (int j = 0; j < nbits; ++j)
    if ((v >> j) & 1u) base[(pos + j) >> 3] |= uint8_t(1u << ((pos + j) & 7));
}
uint32_t topk2_get_bits(const uint8_t* base, int64_t pos, int nbits) {
  uint32_t v = 0;
  for (int j = 0; j < nbits; ++j) v |= uint32_t((base[(pos + j) >> 3] >> ((pos + j) & 7)) & 1u) << j;
  return v;
}
uint16_t topk2_level(double sum, int64_t count) {
  return count > 0 ? bf16_bits(float(sum / double(count))) : uint16_t(0);
}

}  // namespace

int64_t Topk2Compressor::k_for(int64_t len, double density) {
  return std::clamp<int64_t>(std::llround(density * double(len)), 1, len);
}

int Topk2Compressor::index_bits(int64_t n) {
  return std::max(1, int(std::bit_width(uint64_t(std::min(kChunk, n) - 1))));
}

int64_t Topk2Compressor::selected(int64_t n, double density) {
  int64_t K = 0;
  for (int64_t c = 0; c < chunks(n); ++c) K += k_for(chunk_len(n, c), density);
  return K;
}

int64_t Topk2Compressor::wire_bytes(int64_t rows, int64_t cols, double density) {
  const int64_t n = rows * cols, K = selected(n, density);
  return 4 * chunks(n) + (K * index_bits(n) + 7) / 8 + (2 * K + 7) / 8;
}

Topk2Compressor::Topk2Compressor(int64_t rows, int64_t cols, double density, kernels::Ops& ops)
    : StatelessCompressor(rows, cols), density_(density), ops_(ops) {
  wire::check_shape("topk2", rows, cols);
  OCC_CHECK(density > 0.0 && density <= kMaxDensity,
            "topk2 density must be in (0, {}] (got {}); pass the share of each chunk's values to send, e.g. 0.02",
            kMaxDensity, density);
}

void Topk2Compressor::encode_host(const float* m, int64_t n, double density, uint8_t* wire) {
  const int64_t nc = chunks(n), K = selected(n, density);
  const int b = index_bits(n);
  std::memset(wire, 0, size_t(wire::words_for_bytes(4 * nc + (K * b + 7) / 8 + (2 * K + 7) / 8)) * 4);
  uint8_t* indices = wire + 4 * nc;
  uint8_t* codes = indices + (K * b + 7) / 8;
  std::vector<int32_t> order;
  std::vector<std::pair<int32_t, uint32_t>> sent;  // (index, code), by index
  int64_t pos = 0;
  for (int64_t c = 0; c < nc; ++c) {
    const float* x = m + c * kChunk;
    const int64_t len = chunk_len(n, c), k = k_for(len, density);
    order.resize(size_t(len));
    std::iota(order.begin(), order.end(), 0);
    auto mag = [x](int32_t i) { return float_bits(x[i]) & 0x7fffffffu; };
    auto before = [&mag](int32_t a, int32_t b) {  // larger |x| first, then the lower index
      const uint32_t ma = mag(a), mb = mag(b);
      return ma != mb ? ma > mb : a < b;
    };
    if (k < len) std::nth_element(order.begin(), order.begin() + k, order.end(), before);
    std::sort(order.begin(), order.begin() + k, before);
    const int64_t high = k / 2;
    double sum_hi = 0, sum_lo = 0;
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
    for (const auto& [i, code] : sent) {
      topk2_put_bits(indices, pos * b, b, uint32_t(i));
      topk2_put_bits(codes, pos * 2, 2, code);
      ++pos;
    }
  }
}

void Topk2Compressor::decode_host(const uint8_t* wire, int64_t n, double density, float* out) {
  const int64_t nc = chunks(n), K = selected(n, density);
  const int b = index_bits(n);
  const uint8_t* indices = wire + 4 * nc;
  const uint8_t* codes = indices + (K * b + 7) / 8;
  std::fill(out, out + n, 0.0f);
  int64_t pos = 0;
  for (int64_t c = 0; c < nc; ++c) {
    const int64_t len = chunk_len(n, c), k = k_for(len, density);
    const float lo = bf16_value(uint16_t(wire[4 * c] | (wire[4 * c + 1] << 8)));
    const float hi = bf16_value(uint16_t(wire[4 * c + 2] | (wire[4 * c + 3] << 8)));
    for (int64_t r = 0; r < k; ++r, ++pos) {
      const uint32_t i = topk2_get_bits(indices, pos * b, b), code = topk2_get_bits(codes, pos * 2, 2);
      OCC_CHECK(i < uint32_t(len), "topk2: index {} outside its chunk of {} values (a corrupt message)", i, len);
      const float v = (code & 2u) ? hi : lo;
      out[c * kChunk + i] = (code & 1u) ? -v : v;
    }
  }
}

void Topk2Compressor::encode(const float* m, float* wire) {
  const int64_t n = rows_ * cols_;
  if (ops_.device() == Device::Cpu) return encode_host(m, n, density_, reinterpret_cast<uint8_t*>(wire));
  host_in_.resize(size_t(n));
  host_wire_.resize(size_t(wire_floats()));
  ops_.synchronize();
  device_copy(host_in_.data(), Device::Cpu, m, ops_.device(), size_t(n) * sizeof(float));
  encode_host(host_in_.data(), n, density_, reinterpret_cast<uint8_t*>(host_wire_.data()));
  device_copy(wire, ops_.device(), host_wire_.data(), Device::Cpu, host_wire_.size() * sizeof(float));
}

void Topk2Compressor::decode(const float* wire, float* out) const {
  const int64_t n = rows_ * cols_;
  if (ops_.device() == Device::Cpu) return decode_host(reinterpret_cast<const uint8_t*>(wire), n, density_, out);
  host_in_.resize(size_t(n));
  host_wire_.resize(size_t(wire_floats()));
  ops_.synchronize();
  device_copy(host_wire_.data(), Device::Cpu, wire, ops_.device(), host_wire_.size() * sizeof(float));
  decode_host(reinterpret_cast<const uint8_t*>(host_wire_.data()), n, density_, host_in_.data());
  device_copy(out, ops_.device(), host_in_.data(), Device::Cpu, size_t(n) * sizeof(float));
}

}  // namespace occ
