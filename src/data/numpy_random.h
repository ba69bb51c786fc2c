#pragma once
// NumPy's legacy numpy.random.RandomState(seed), the generator Megatron-core's
// GPTDataset orders its data with, reproduced draw for draw (numpy/random:
// _mt19937.pyx, mtrand.pyx, src/distributions/distributions.c):
//   - RandomState(int) seeds MT19937 with mt19937_seed, the classic init_genrand
//     (key[i] = 1812433253 * (key[i-1] ^ key[i-1] >> 30) + i), which is what
//     std::mt19937(seed) does: the two give the same 32-bit draws;
//   - RandomState.shuffle(x) of a 1-D array, whatever its dtype: for i from n - 1
//     down to 1, j = random_interval(i), swap x[i] and x[j];
//   - random_interval(max): the smallest all-ones mask covering max; draws masked
//     until one is <= max, 32-bit draws while max fits 32 bits, else 64-bit ones
//     (mt19937_next64: the first draw is the high word).
// Checked live against Debian's python3-numpy (tests/unit/test_numpy_random.cpp).
#include <cstdint>
#include <random>
#include <utility>

namespace occ {

class NumpyRandomState {
 public:
  explicit NumpyRandomState(uint32_t seed) : mt_(seed) {}

  uint32_t next_uint32() { return uint32_t(mt_()); }
  uint64_t next_uint64() {
    const uint64_t high = next_uint32();  // sequenced: the high word is drawn first
    return high << 32 | next_uint32();
  }

  // Uniform in [0, max].
  uint64_t random_interval(uint64_t max) {
    if (max == 0) return 0;
    uint64_t mask = max;
    for (int shift = 1; shift <= 32; shift *= 2) mask |= mask >> shift;
    uint64_t value;
    if (max <= 0xffffffffu) {
      while ((value = next_uint32() & mask) > max) {
      }
    } else {
      while ((value = next_uint64() & mask) > max) {
      }
    }
    return value;
  }

  // The same draws and swaps, in the same order, as the plain loop
  //   for i = n - 1 .. 1: j = random_interval(i); swap(data[i], data[j])
  // but with the draws made kAhead steps early, so that data[j] is prefetched
  // before its swap (on arrays beyond the caches each swap would otherwise wait
  // for memory; the draws do not depend on the data).
  template <class T>
  void shuffle(T* data, int64_t n) {
    constexpr int64_t kAhead = 32;
    int64_t ahead[kAhead];
    int64_t next = n - 1;  // the next i to draw for
    for (int64_t k = 0; k < kAhead && next > 0; ++k, --next) {
      ahead[k] = int64_t(random_interval(uint64_t(next)));
      __builtin_prefetch(data + ahead[k], 1);
    }
    for (int64_t i = n - 1; i > 0; --i) {
      const int64_t slot = (n - 1 - i) % kAhead;
      const int64_t j = ahead[slot];
      if (next > 0) {
        ahead[slot] = int64_t(random_interval(uint64_t(next--)));
        __builtin_prefetch(data + ahead[slot], 1);
      }
      if (j != i) std::swap(data[i], data[j]);
    }
  }

 private:
  std::mt19937 mt_;
};

}  // namespace occ
