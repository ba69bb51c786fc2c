// NumpyRandomState against NumPy itself (Debian's python3-numpy, run live):
// RandomState(seed)'s raw 32-bit draws equal std::mt19937(seed)'s; its shuffle of
// int32, uint32 and int64 arrays of many sizes (two shuffles in a row from one
// state, as GPTDataset draws its document index then its shuffle index); and
// random_interval's 64-bit path (randint over 2^40 draws the same masked words).
#include <gtest/gtest.h>

#include "temp_dir.h"

#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "data/npy_file.h"
#include "data/numpy_random.h"

namespace {

const char* kPython = "/usr/bin/python3";
const uint32_t kSeeds[] = {0, 1, 1234, 4294967295u, 20240607};
const int64_t kSizes[] = {1, 2, 3, 17, 1000, 65537, 300001};

// Runs NumPy: for every seed and size, arange(n) of each dtype shuffled twice in a
// row from RandomState(seed) (first n, then n // 3 + 1), and 64 raw draws and 64
// randint(0, 2**40) draws, each saved as .npy under `dir`.
void run_numpy(const std::string& dir) {
  const std::string script = R"PY(
import sys, numpy
out = sys.argv[1]
for seed in [0, 1, 1234, 4294967295, 20240607]:
    for n in [1, 2, 3, 17, 1000, 65537, 300001]:
        for dtype in ["int32", "uint32", "int64"]:
            rs = numpy.random.RandomState(seed)
            a = numpy.arange(n, dtype=dtype); rs.shuffle(a)
            b = numpy.arange(n // 3 + 1, dtype=dtype); rs.shuffle(b)
            numpy.save(f"{out}/shuffle-{seed}-{n}-{dtype}-a.npy", a)
            numpy.save(f"{out}/shuffle-{seed}-{n}-{dtype}-b.npy", b)
    rs = numpy.random.RandomState(seed)
    numpy.save(f"{out}/raw-{seed}.npy", rs.randint(0, 2**32, size=64, dtype=numpy.int64))
    numpy.save(f"{out}/wide-{seed}.npy", rs.randint(0, 2**40, size=64, dtype=numpy.int64))
)PY";
  const std::string path = dir + "/numpy_random.py";
  std::FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs(script.c_str(), f);
  std::fclose(f);
  const std::string cmd = std::string(kPython) + " " + path + " " + dir;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd << " failed: this test needs Debian's python3-numpy "
                                         << "(scripts/setup.sh installs it)";
}

template <class T>
void expect_shuffles(const std::string& dir, uint32_t seed, int64_t n, const char* dtype) {
  SCOPED_TRACE(std::string("seed ") + std::to_string(seed) + ", n " + std::to_string(n) + ", " + dtype);
  occ::NumpyRandomState rs(seed);
  std::vector<T> a(static_cast<size_t>(n)), b(static_cast<size_t>(n / 3 + 1));
  std::iota(a.begin(), a.end(), T(0));
  std::iota(b.begin(), b.end(), T(0));
  rs.shuffle(a.data(), int64_t(a.size()));
  rs.shuffle(b.data(), int64_t(b.size()));
  const std::string stem = dir + "/shuffle-" + std::to_string(seed) + "-" + std::to_string(n) + "-" + dtype;
  for (const auto& [ours, file] : {std::pair{&a, stem + "-a.npy"}, std::pair{&b, stem + "-b.npy"}}) {
    const occ::NpyArray want = occ::NpyArray::open(file);
    ASSERT_EQ(want.elements(), int64_t(ours->size()));
    for (int64_t i = 0; i < want.elements(); ++i) ASSERT_EQ(int64_t((*ours)[size_t(i)]), want.at(i)) << "element " << i;
  }
}

}  // namespace

TEST(NumpyRandomState, EqualsNumpyLive) {
  occ::test::TempDir dir;
  run_numpy(dir.str());
  for (uint32_t seed : kSeeds) {
    occ::NumpyRandomState rs(seed);
    std::mt19937 mt(seed);
    const occ::NpyArray raw = occ::NpyArray::open(dir / ("raw-" + std::to_string(seed) + ".npy"));
    for (int64_t i = 0; i < raw.elements(); ++i) {
      const uint32_t draw = rs.next_uint32();
      ASSERT_EQ(int64_t(draw), raw.at(i)) << "seed " << seed << ", draw " << i;
      ASSERT_EQ(draw, uint32_t(mt())) << "std::mt19937(seed) draws the same";
    }
    const occ::NpyArray wide = occ::NpyArray::open(dir / ("wide-" + std::to_string(seed) + ".npy"));
    for (int64_t i = 0; i < wide.elements(); ++i)
      ASSERT_EQ(int64_t(rs.random_interval((uint64_t(1) << 40) - 1)), wide.at(i)) << "seed " << seed << ", draw " << i;
    for (int64_t n : kSizes) {
      expect_shuffles<int32_t>(dir.str(), seed, n, "int32");
      expect_shuffles<uint32_t>(dir.str(), seed, n, "uint32");
      expect_shuffles<int64_t>(dir.str(), seed, n, "int64");
    }
  }
}
