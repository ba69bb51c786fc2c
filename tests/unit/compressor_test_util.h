#pragma once
// Shared by the compressor unit tests: the two fp8 formats as test cases and
// a seeded Gaussian.
#include <cstdint>
#include <random>
#include <vector>

#include "core/precision.h"

namespace occ::test {


using Encode = uint8_t (*)(float);
using Decode = float (*)(uint8_t);

struct Fp8Case {
  const char* name;
  Encode encode;
  Decode decode;
  uint8_t max_code;  // largest finite positive code
  int mbits;
};
const Fp8Case kE4m3{"e4m3", float_to_fp8_e4m3, fp8_e4m3_to_float, 0x7e, 3};
const Fp8Case kE5m2{"e5m2", float_to_fp8_e5m2, fp8_e5m2_to_float, 0x7b, 2};

inline std::vector<float> gaussian(size_t count, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(count);
  for (auto& x : v) x = d(gen);
  return v;
}

inline uint32_t bits_of(float x) { return float_bits(x); }

}  // namespace occ::test
