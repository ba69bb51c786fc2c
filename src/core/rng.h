#pragma once
// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11).
// A value is a pure function of (key, counter): initial weights and dropout
// masks are keyed by what they belong to and indexed by global coordinates,
// so they do not depend on how the job is split over processes.
//
// The bit-level functions are compiled for host and device alike (OCC_HD), so
// a CUDA kernel draws bit-identical dropout masks to the CPU kernels.
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define OCC_HD __host__ __device__
#else
#define OCC_HD
#endif

namespace occ {

// Four 32-bit outputs of one Philox block.
struct PhiloxBlock {
  uint32_t v[4];
  OCC_HD uint32_t operator[](int i) const { return v[i]; }
};

struct Philox {
  static OCC_HD inline PhiloxBlock block(uint64_t key, uint64_t hi, uint64_t lo) {
    uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
    uint32_t c0 = uint32_t(lo), c1 = uint32_t(lo >> 32), c2 = uint32_t(hi), c3 = uint32_t(hi >> 32);
    for (int round = 0; round < 10; ++round) {
      uint64_t p0 = uint64_t(0xD2511F53u) * c0;
      uint64_t p1 = uint64_t(0xCD9E8D57u) * c2;
      uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0;
      uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
      c1 = uint32_t(p1);
      c3 = uint32_t(p0);
      c0 = n0;
      c2 = n2;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    return PhiloxBlock{{c0, c1, c2, c3}};
  }
};

// Mixes fields into one 64-bit key (splitmix64 finaliser per field).
OCC_HD inline uint64_t mix_key(uint64_t h, uint64_t v) {
  uint64_t z = h ^ (v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
template <class... Fields>
OCC_HD inline uint64_t make_key(uint64_t first, Fields... rest) {
  uint64_t h = mix_key(0x6F7074696D7573ull, first);
  ((h = mix_key(h, uint64_t(rest))), ...);
  return h;
}

// Uniform in (0, 1] from 32 random bits (never 0, so log() is safe).
OCC_HD inline float bits_to_unit(uint32_t x) { return (float(x >> 8) + 1.0f) * (1.0f / 16777216.0f); }

// Element `index` of a standard-normal stream: one Philox block gives two
// Box-Muller pairs, i.e. four normals.
inline float normal_at(uint64_t key, uint64_t hi, uint64_t index) {
  auto b = Philox::block(key, hi, index >> 2);
  int lane = int(index & 3);
  float u1 = bits_to_unit(b[(lane & 2)]), u2 = bits_to_unit(b[(lane & 2) + 1]);
  float r = std::sqrt(-2.0f * std::log(u1));
  float theta = 6.2831853071795864f * u2;
  return (lane & 1) ? r * std::sin(theta) : r * std::cos(theta);
}

// Element `index` of a uniform (0,1] stream: one block gives four values.
OCC_HD inline float uniform_at(uint64_t key, uint64_t hi, uint64_t index) {
  auto b = Philox::block(key, hi, index >> 2);
  return bits_to_unit(b[index & 3]);
}

}  // namespace occ
