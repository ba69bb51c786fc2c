// The blending index of many weight vectors, written raw to argv[1]: CMake builds
// this twice, at -march=native and at -march=x86-64 (no FMA), and the test
// data.blend_index_march requires the two files to be equal byte for byte (the
// native build's index also equals Megatron's own: test_megatron_goldens.cpp).
// Megatron's weights (0.7/0.2/0.1, 0.5/0.3/0.2, ...) and 200 random vectors of
// 2 to 12 datasets, 20,000 samples each: ties and near-ties that a fused
// multiply-add would break differently.
#include <cstdint>
#include <cstdio>
#include <vector>

#include "data/blending_index.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_FILE\n", argv[0]);
    return 2;
  }
  std::vector<std::vector<double>> weights = {{0.7, 0.2, 0.1}, {0.5, 0.3, 0.2}, {0.7, 0.3}, {0.6, 0.4},
                                              {0.5, 0.5},      {1 / 3.0, 1 / 3.0, 1 / 3.0}};
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&state] {  // splitmix64: the same vectors on every machine
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  for (int v = 0; v < 200; ++v) {
    std::vector<double> w(2 + next() % 11);
    double sum = 0;
    for (double& x : w) sum += x = double(1 + next() % 1000) / 100.0;
    for (double& x : w) x /= sum;
    weights.push_back(w);
  }
  std::FILE* out = std::fopen(argv[1], "wb");
  if (!out) return 1;
  const int64_t n = 20000;
  std::vector<int16_t> dataset(n);
  std::vector<int64_t> sample(n);
  for (const auto& w : weights) {
    occ::build_blending_index(w, n, dataset.data(), sample.data());
    std::fwrite(dataset.data(), sizeof(int16_t), size_t(n), out);
    std::fwrite(sample.data(), sizeof(int64_t), size_t(n), out);
  }
  return std::fclose(out) == 0 ? 0 : 1;
}
