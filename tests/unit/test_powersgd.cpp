// PowerSGD compressor (compress/powersgd.h), its error feedback wrapper and the
// epilogue-only rule of compressed backpropagation (compress/compressed_backprop.h).
//
// Facts checked (n x m matrix, rank r, k = min(r, n, m) the effective rank):
//   * rank(M) <= k: one encode/decode rebuilds M to fp32 precision. The warm
//     start Q is a random orthonormal m x k matrix, so P = M Q spans range(M)
//     (almost surely), and P_orth P_orth^T M = M.
//   * r >= min(n, m) is lossless for any (full-rank) matrix.
//   * the error of one step falls as r grows (random full-rank matrix).
//   * ErrorFeedback: sum of all decoded messages + the final residual == sum of
//     all inputs (nothing is ever lost, only delayed).
//   * the wire is [P (n x k) | Q (m x k)], P orthonormal, k (n + m) floats.
//   * the same seed and key give bitwise the same wire; another seed or key does not.
//   * save_state / load_state through a tensor file continues bit-exactly.
//   * EC: stage s > 0 compresses exactly its last P - s backward sends (all of
//     them when M < P - s), i.e. the ones after its last forward in 1F1B;
//     without EC every send of every stage s > 0; stage 0 sends none.
#include "compress/powersgd.h"
#include "compress/error_feedback.h"

#include <gtest/gtest.h>

#include "temp_dir.h"
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "compress/compressed_backprop.h"
#include "core/tensor_file.h"
#include "parallel/pipeline_schedule.h"

namespace occ {
namespace {

namespace fs = std::filesystem;

using TempDir = occ::test::TempDir;

std::vector<float> gaussian(size_t count, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(count);
  for (auto& x : v) x = d(gen);
  return v;
}

// A x B^T with A n x r, B m x r Gaussian: a matrix of rank r (almost surely).
std::vector<float> low_rank(int64_t n, int64_t m, int64_t r, uint32_t seed) {
  auto a = gaussian(size_t(n * r), seed), b = gaussian(size_t(m * r), seed + 1000);
  std::vector<float> out(size_t(n * m));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      double s = 0;
      for (int64_t l = 0; l < r; ++l) s += double(a[size_t(i * r + l)]) * b[size_t(j * r + l)];
      out[size_t(i * m + j)] = float(s);
    }
  return out;
}

float max_abs(const std::vector<float>& v) {
  float mx = 0;
  for (float x : v) mx = std::max(mx, std::fabs(x));
  return mx;
}

float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float mx = 0;
  for (size_t i = 0; i < a.size(); ++i) mx = std::max(mx, std::fabs(a[i] - b[i]));
  return mx;
}

double frobenius_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return std::sqrt(s);
}

// One encode + decode of a fresh compressor.
std::vector<float> roundtrip(const std::vector<float>& m, int64_t n, int64_t c, int64_t r, uint64_t seed = 7,
                             uint64_t key = 3) {
  PowerSgdCompressor comp(n, c, r, seed, key);
  std::vector<float> wire(size_t(comp.wire_floats())), out(size_t(n * c));
  comp.encode(m.data(), wire.data());
  comp.decode(wire.data(), out.data());
  return out;
}

TEST(PowerSgd, LowRankMatrixIsRebuiltExactly) {
  struct Case {
    int64_t n, m, true_rank, r;
  };
  for (const Case& c : std::vector<Case>{{64, 64, 4, 4},
                                         {64, 64, 3, 8},
                                         {64, 64, 1, 1},
                                         {96, 40, 5, 5},
                                         {40, 96, 6, 16},
                                         {128, 32, 2, 12}}) {
    SCOPED_TRACE(testing::Message() << c.n << "x" << c.m << " of rank " << c.true_rank << ", r " << c.r);
    const auto m = low_rank(c.n, c.m, c.true_rank, uint32_t(c.n * 31 + c.m * 7 + c.true_rank));
    const auto out = roundtrip(m, c.n, c.m, c.r);
    EXPECT_LE(max_diff(m, out), 1e-5f * max_abs(m));
  }
}

TEST(PowerSgd, RankAtLeastMinDimensionIsLossless) {
  struct Case {
    int64_t n, m, r;
  };
  for (const Case& c : std::vector<Case>{{48, 32, 32}, {32, 48, 32}, {48, 32, 100}, {64, 64, 64}, {16, 80, 17}}) {
    SCOPED_TRACE(testing::Message() << c.n << "x" << c.m << ", r " << c.r);
    const auto m = gaussian(size_t(c.n * c.m), uint32_t(c.n + 100 * c.m));
    EXPECT_EQ(powersgd::effective_rank(c.n, c.m, c.r), std::min({c.n, c.m, c.r}));
    const auto out = roundtrip(m, c.n, c.m, c.r);
    EXPECT_LE(max_diff(m, out), 1e-5f * max_abs(m));
  }
}

TEST(PowerSgd, ErrorFallsAsRankGrows) {
  const int64_t n = 96, c = 64;
  const auto m = gaussian(size_t(n * c), 12345);
  std::vector<double> errs;
  std::vector<int64_t> ranks{1, 2, 4, 8, 16, 32, 64};
  for (int64_t r : ranks) errs.push_back(frobenius_diff(m, roundtrip(m, n, c, r)));
  for (size_t i = 1; i < errs.size(); ++i) {
    SCOPED_TRACE(testing::Message() << "r " << ranks[i - 1] << " -> " << ranks[i] << ": " << errs[i - 1] << " -> "
                                    << errs[i]);
    EXPECT_LT(errs[i], errs[i - 1]);
  }
  double norm = 0;
  for (float x : m) norm += double(x) * x;
  norm = std::sqrt(norm);
  EXPECT_LT(errs[0], norm);             // rank 1 already captures something
  EXPECT_LE(errs.back(), 1e-5 * norm);  // r = min(n, m): lossless
}

TEST(PowerSgd, WireSizeAndOrthonormalP) {
  struct Case {
    int64_t n, m, r;
  };
  for (const Case& c : std::vector<Case>{{64, 64, 4}, {96, 40, 8}, {40, 96, 16}, {32, 16, 64}, {100, 30, 1}}) {
    SCOPED_TRACE(testing::Message() << c.n << "x" << c.m << ", r " << c.r);
    PowerSgdCompressor comp(c.n, c.m, c.r, 11, 5);
    const int64_t k = std::min({c.n, c.m, c.r});
    EXPECT_EQ(comp.rank(), k);
    EXPECT_EQ(comp.rows(), c.n);
    EXPECT_EQ(comp.cols(), c.m);
    EXPECT_EQ(comp.wire_floats(), k * (c.n + c.m));
    const auto m = gaussian(size_t(c.n * c.m), uint32_t(c.r));
    std::vector<float> wire(size_t(comp.wire_floats()));
    // Also after warm starts: every call's P is orthonormal.
    for (int call = 0; call < 3; ++call) {
      comp.encode(m.data(), wire.data());
      const float* p = wire.data();
      float worst = 0;
      for (int64_t a = 0; a < k; ++a)
        for (int64_t b = 0; b < k; ++b) {
          double dot = 0;
          for (int64_t i = 0; i < c.n; ++i) dot += double(p[i * k + a]) * p[i * k + b];
          worst = std::max(worst, float(std::fabs(dot - (a == b ? 1.0 : 0.0))));
        }
      EXPECT_LE(worst, 1e-5f) << "call " << call;
      // Q on the wire is M^T P (the receiver rebuilds P Q^T), and the warm start.
      const float* q = wire.data() + c.n * k;
      float qerr = 0;
      for (int64_t j = 0; j < c.m; ++j)
        for (int64_t a = 0; a < k; ++a) {
          double s = 0;
          for (int64_t i = 0; i < c.n; ++i) s += double(m[size_t(i * c.m + j)]) * p[i * k + a];
          qerr = std::max(qerr, float(std::fabs(s - q[j * k + a])));
        }
      EXPECT_LE(qerr, 1e-4f * (1.0f + max_abs(m)));
      EXPECT_EQ(std::memcmp(comp.q().data(), q, size_t(c.m * k) * sizeof(float)), 0);
    }
  }
}

TEST(PowerSgd, InitialQIsOrthonormal) {
  const int64_t m = 50, k = 7;
  std::vector<float> q(size_t(m * k));
  powersgd::init_q(q.data(), m, k, 99, 4);
  for (int64_t a = 0; a < k; ++a)
    for (int64_t b = 0; b < k; ++b) {
      double dot = 0;
      for (int64_t i = 0; i < m; ++i) dot += double(q[size_t(i * k + a)]) * q[size_t(i * k + b)];
      EXPECT_NEAR(dot, a == b ? 1.0 : 0.0, 1e-5);
    }
}

TEST(PowerSgd, SameSeedSameWireOtherSeedOrKeyDiffers) {
  const int64_t n = 64, c = 48, r = 6;
  const auto m1 = gaussian(size_t(n * c), 1), m2 = gaussian(size_t(n * c), 2);
  auto wires = [&](uint64_t seed, uint64_t key) {
    PowerSgdCompressor comp(n, c, r, seed, key);
    std::vector<float> w1(size_t(comp.wire_floats())), w2(w1.size());
    comp.encode(m1.data(), w1.data());
    comp.encode(m2.data(), w2.data());  // warm-started from the first
    w1.insert(w1.end(), w2.begin(), w2.end());
    return w1;
  };
  const auto a = wires(42, 1), b = wires(42, 1), other_seed = wires(43, 1), other_key = wires(42, 2);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(a.data(), other_seed.data(), a.size() * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(a.data(), other_key.data(), a.size() * sizeof(float)), 0);
}

TEST(ErrorFeedback, NothingIsLostOverASequence) {
  const int64_t n = 64, c = 32, r = 2;
  const int K = 12;
  ErrorFeedback ef(std::make_unique<PowerSgdCompressor>(n, c, r, 5, 9));
  EXPECT_EQ(ef.wire_floats(), r * (n + c));
  std::vector<double> sum_in(size_t(n * c), 0.0), sum_out(size_t(n * c), 0.0);
  std::vector<float> wire(size_t(ef.wire_floats())), out(size_t(n * c));
  double worst_residual = 0;
  for (int it = 0; it < K; ++it) {
    // Correlated inputs (a slowly moving mean) plus noise, as gradients are.
    auto m = gaussian(size_t(n * c), uint32_t(100 + it));
    const auto base = gaussian(size_t(n * c), 7);
    for (size_t i = 0; i < m.size(); ++i) m[i] = 0.3f * m[i] + base[i];
    ef.encode(m.data(), wire.data());
    ef.decode(wire.data(), out.data());
    for (size_t i = 0; i < m.size(); ++i) {
      sum_in[i] += m[i];
      sum_out[i] += out[i];
    }
    worst_residual = std::max(worst_residual, double(max_abs(ef.residual().to_host())));
  }
  ASSERT_EQ(ef.residual().size(), size_t(n * c));
  EXPECT_GT(worst_residual, 0.1);  // lossy at rank 2: the check below is not vacuous
  double worst = 0, scale = 0;
  const std::vector<float> residual = ef.residual().to_host();
  for (size_t i = 0; i < sum_in.size(); ++i) {
    worst = std::max(worst, std::fabs(sum_out[i] + residual[i] - sum_in[i]));
    scale = std::max(scale, std::fabs(sum_in[i]));
  }
  EXPECT_LE(worst, 1e-5 * K * (1.0 + scale)) << "sum of inputs " << scale;
}

TEST(ErrorFeedback, ResidualIsInputMinusDecoded) {
  const int64_t n = 40, c = 24, r = 3;
  ErrorFeedback ef(std::make_unique<PowerSgdCompressor>(n, c, r, 5, 9));
  const auto m = gaussian(size_t(n * c), 77);
  std::vector<float> wire(size_t(ef.wire_floats())), out(size_t(n * c));
  ef.encode(m.data(), wire.data());
  ef.decode(wire.data(), out.data());
  const std::vector<float> residual = ef.residual().to_host();
  for (size_t i = 0; i < m.size(); ++i) EXPECT_NEAR(residual[i], m[i] - out[i], 1e-5f) << i;
}

// Encodes `first` on a, saves a's state, loads it into b (made with another
// seed, so only the load can make them agree), then encodes `second` on both.
template <class Make>
void check_state_roundtrip(Make make, const std::string& prefix) {
  const int64_t n = 48, c = 40;
  const auto first = gaussian(size_t(n * c), 3), second = gaussian(size_t(n * c), 4), third = gaussian(size_t(n * c), 5);
  auto a = make(1);
  std::vector<float> wa(size_t(a->wire_floats()));
  a->encode(first.data(), wa.data());
  TempDir dir;
  TensorFileWriter w(nlohmann::json{{"what", "test"}});
  a->save_state(w, prefix);
  w.write(dir.file("state.bin"));
  TensorFileReader r = TensorFileReader::open(dir.file("state.bin"));

  auto fresh = make(2);  // not loaded: must differ (else the test proves nothing)
  auto b = make(2);
  EXPECT_TRUE(b->load_state(r, prefix));
  EXPECT_FALSE(make(2)->load_state(r, "other/"));
  std::vector<float> wb(wa.size()), wf(wa.size());
  for (const auto* m : {&second, &third}) {
    a->encode(m->data(), wa.data());
    b->encode(m->data(), wb.data());
    fresh->encode(m->data(), wf.data());
    EXPECT_EQ(std::memcmp(wa.data(), wb.data(), wa.size() * sizeof(float)), 0);
    EXPECT_NE(std::memcmp(wa.data(), wf.data(), wa.size() * sizeof(float)), 0);
  }
}

TEST(PowerSgd, StateRoundTripContinuesBitExactly) {
  check_state_roundtrip([](uint64_t seed) { return std::make_unique<PowerSgdCompressor>(48, 40, 5, seed, 1); },
                        "cb/");
}

TEST(ErrorFeedback, StateRoundTripContinuesBitExactly) {
  // The residual travels too: with the same seed (same warm start), a fresh
  // compressor differs only by its residual.
  check_state_roundtrip(
      [](uint64_t seed) {
        return std::make_unique<ErrorFeedback>(std::make_unique<PowerSgdCompressor>(48, 40, 5, seed, 1));
      },
      "cb/");
  check_state_roundtrip(
      [](uint64_t seed) {
        (void)seed;
        return std::make_unique<ErrorFeedback>(std::make_unique<PowerSgdCompressor>(48, 40, 5, 17, 1));
      },
      "cb/");
}

TEST(CompressedBackprop, SizesAndResidual) {
  CompressedBackpropConfig cfg;
  cfg.enabled = true;
  cfg.rank = 4;
  CompressedBackprop plain(cfg, 64, 32, 1, 2);
  EXPECT_EQ(plain.wire_floats(), 4 * (64 + 32));
  EXPECT_EQ(plain.residual(), nullptr);
  cfg.lazy_error = true;
  CompressedBackprop lep(cfg, 64, 32, 1, 2);
  ASSERT_NE(lep.residual(), nullptr);
  EXPECT_EQ(lep.residual()->size(), size_t(64 * 32));
}

TEST(CompressedBackprop, EpilogueOnlyRule) {
  CompressedBackpropConfig off, all, ec;
  all.enabled = true;
  ec.enabled = true;
  ec.epilogue_only = true;
  off.epilogue_only = true;  // EC without CB compresses nothing
  for (bool late : {false, true}) {
    EXPECT_FALSE(CompressedBackprop::compresses(off, late));
    EXPECT_TRUE(CompressedBackprop::compresses(all, late));
    EXPECT_EQ(CompressedBackprop::compresses(ec, late), late);
  }
}

}  // namespace
}  // namespace occ
