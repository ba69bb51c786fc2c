// The CUDA twins of the adaptive codec and of top-k with 2-bit values
// (kernels/cuda/adaptive_codes.cu, kernels/cuda/topk2_codes.cu) against their
// CPU definitions (kernels/adaptive_codes.cpp, kernels/topk2_codes.cpp): the
// GPU's wire is the CPU's byte for byte (also its padding: the GPU's wire
// starts as junk) and the decoded values are the CPU's bit for bit, on row
// lengths 64 does not divide and tensors 4096 does not divide, high fractions
// 0, 1/8 and 1, densities 0.02 and 0.25, rounding to nearest and
// stochastically (over several message keys), with ties, zeros, -0,
// subnormals and a NaN / infinite tile or chunk; a corrupt message is refused
// on both backends.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "compress/adaptive_codec.h"
#include "compress/topk2_compressor.h"
#include "core/error.h"
#include "cuda_twin.h"

namespace occ::kernels {
namespace {

// Encodes m on both backends (the GPU's wire and output filled with junk
// first) and expects the same wire bytes and the same decoded bits. Returns
// the CPU's wire.
std::vector<float> expect_same_message(MatrixCompressor& on_gpu, MatrixCompressor& on_cpu, FTwin& m,
                                       const std::string& name) {
  FTwin wire(std::vector<float>(size_t(on_cpu.wire_floats()), 7.0f));
  on_cpu.encode(m.c(), wire.c());
  on_gpu.encode(m.g(), wire.g());
  const std::vector<float> gpu_wire = wire.gpu();
  // Bits, not floats: a wire word of packed bytes may read as a NaN.
  EXPECT_EQ(std::memcmp(gpu_wire.data(), wire.cpu.data(), gpu_wire.size() * sizeof(float)), 0) << name << " wire";
  FTwin out(filled(int64_t(m.cpu.size()), 3.0f));
  on_cpu.decode(wire.c(), out.c());
  on_gpu.decode(wire.g(), out.g());
  const std::vector<float> got = out.gpu();
  EXPECT_EQ(std::memcmp(got.data(), out.cpu.data(), got.size() * sizeof(float)), 0) << name << " decoded";
  return wire.cpu;
}

// Values spread over magnitudes (so that tiles' energies and chunks' ranks
// differ), with the edge cases at fixed places where the tensor has room.
std::vector<float> edge_values(int64_t rows, int64_t cols, uint64_t seed, bool non_finite) {
  std::vector<float> v = random_values(size_t(rows * cols), seed);
  const int64_t n = rows * cols;
  for (int64_t p = 0; p < n; ++p) v[size_t(p)] *= std::pow(10.0f, float(p % 5) - 2.0f);
  if (rows >= 6) {
    for (int64_t j = 0; j < cols; ++j) v[size_t(1 * cols + j)] = 0.0f;                          // zero row
    for (int64_t j = 0; j < cols; ++j) v[size_t(2 * cols + j)] = (j % 3 ? 0.5f : -0.5f);        // equal magnitudes
    for (int64_t j = 0; j < cols; ++j) v[size_t(3 * cols + j)] = v[size_t(2 * cols + j)];       // an equal row: ties
    for (int64_t j = 0; j < cols; ++j) v[size_t(4 * cols + j)] = float(j % 3) * 1e-41f;         // subnormal
    v[size_t(4 * cols)] = -0.0f;
    v[size_t(5 * cols)] = 3e37f;  // an outlier
  }
  if (non_finite && n >= 8) {
    v[size_t(n / 2)] = std::nanf("");
    v[size_t(n - 1)] = -std::numeric_limits<float>::infinity();
  }
  return v;
}

TEST_F(CudaOpsTest, AdaptiveCodecOnTheGpuSendsTheCpuWire) {
  // (rows, cols): cols 64 divides, does not divide, is below; one tile; T not a multiple of 8; many tiles.
  const std::pair<int64_t, int64_t> shapes[] = {{96, 64}, {5, 70}, {3, 1}, {33, 200}, {7, 130}, {2, 1000}, {256, 4096}};
  for (double f : {0.0, 0.125, 1.0})
    for (bool stochastic : {false, true})
      for (auto [rows, cols] : shapes)
        for (bool non_finite : {false, true}) {
          const std::string name = "adaptive F " + std::to_string(f) + (stochastic ? " stochastic " : " nearest ") +
                                   std::to_string(rows) + "x" + std::to_string(cols) + (non_finite ? " NaN" : "");
          AdaptiveCompressor g(rows, cols, f, stochastic, 5, 9, gpu()), c(rows, cols, f, stochastic, 5, 9, cpu());
          for (int s = 0; s < 2; ++s) {
            g.set_message_key(uint64_t(s));
            c.set_message_key(uint64_t(s));
            FTwin m(edge_values(rows, cols, 1000 + uint64_t(s) + uint64_t(rows), non_finite));
            expect_same_message(g, c, m, name + " step " + std::to_string(s));
          }
        }
}

TEST_F(CudaOpsTest, AdaptiveCorruptBitMapIsRefusedOnTheGpuAsOnTheCpu) {
  const int64_t rows = 33, cols = 200;  // T = 132 tiles, H = 17 at F = 1/8
  AdaptiveCompressor g(rows, cols, 0.125, false, 5, 9, gpu()), c(rows, cols, 0.125, false, 5, 9, cpu());
  FTwin m(edge_values(rows, cols, 1200, false));
  std::vector<float> wire = expect_same_message(g, c, m, "adaptive before corruption");
  for (uint8_t flip : {uint8_t(0x01), uint8_t(0x80)}) {  // one tile more high, or one fewer (whichever bit 0 / 7 was)
    std::vector<float> bad = wire;
    reinterpret_cast<uint8_t*>(bad.data())[0] ^= flip;
    FTwin bad_wire(bad), out(filled(rows * cols));
    EXPECT_THROW(c.decode(bad_wire.c(), out.c()), Error) << "the CPU, flip " << int(flip);
    EXPECT_THROW(g.decode(bad_wire.g(), out.g()), Error) << "the GPU, flip " << int(flip);
  }
}

TEST_F(CudaOpsTest, Topk2OnTheGpuSendsTheCpuWire) {
  // (rows, cols): one whole chunk; n below 64; whole chunks; one and a short chunk; many and a short one; n = 1.
  const std::pair<int64_t, int64_t> shapes[] = {{1, 4096}, {3, 5}, {64, 256}, {7, 1000}, {33, 1000}, {1, 1}, {96, 64}};
  for (double density : {0.02, 0.25})
    for (auto [rows, cols] : shapes)
      for (bool non_finite : {false, true}) {
        const std::string name = "topk2 density " + std::to_string(density) + " " + std::to_string(rows) + "x" +
                                 std::to_string(cols) + (non_finite ? " NaN" : "");
        Topk2Compressor g(rows, cols, density, gpu()), c(rows, cols, density, cpu());
        for (int s = 0; s < 2; ++s) {
          FTwin m(edge_values(rows, cols, 1300 + uint64_t(s) + uint64_t(cols), non_finite));
          if (s == 1)  // a chunk of equal magnitudes: the choice is the lowest indices
            for (size_t p = 0; p < m.cpu.size() && p < 4096; ++p) m.cpu[p] = p % 2 ? 0.25f : -0.25f;
          m.dev.assign_from_host(m.cpu);
          expect_same_message(g, c, m, name + " step " + std::to_string(s));
        }
      }
}

TEST_F(CudaOpsTest, Topk2IndexOutsideItsChunkIsRefusedOnTheGpuAsOnTheCpu) {
  const int64_t rows = 3, cols = 5;  // one chunk of 15 values, 4-bit indices
  Topk2Compressor g(rows, cols, 0.25, gpu()), c(rows, cols, 0.25, cpu());
  FTwin m(random_values(15, 1400));
  std::vector<float> wire = expect_same_message(g, c, m, "topk2 before corruption");
  reinterpret_cast<uint8_t*>(wire.data())[4] |= 0x0f;  // the first index (bits 0-3 after the chunk's levels): 15
  FTwin bad(wire), out(filled(15));
  EXPECT_THROW(c.decode(bad.c(), out.c()), Error) << "the CPU";
  EXPECT_THROW(g.decode(bad.g(), out.g()), Error) << "the GPU";
}

}  // namespace
}  // namespace occ::kernels
