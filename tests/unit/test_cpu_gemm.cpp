// The CPU's GEMM paths (kernels/cpu_gemm.h): oneDNN's fp32 matmul against the
// OpenBLAS twin, and its bf16 matmul against the fp32 twin, in every
// transposition, leading dimension, alpha and beta the engine uses.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/precision.h"
#include "core/rng.h"
#include "kernels/cpu_gemm.h"
#include "kernels/kernels.h"

namespace occ::kernels {
namespace {

struct Case {
  bool ta, tb;
  int64_t M, N, K, pad;  // pad: leading dimensions exceed the rows' lengths by this much
  float alpha, beta;
};

// The engine's products: linear forward (NT, beta 0 and 1 with a bias), its input gradient
// (NN, beta 1 when accumulating), its weight gradient (TN, beta 1), and attention's
// scaled QK^T (NT, alpha 1/sqrt(D)), PV (NN) and dV / dK (TN) on strided heads.
const Case kCases[] = {
    {false, true, 37, 53, 29, 0, 1.0f, 0.0f},   {false, true, 64, 96, 48, 0, 1.0f, 1.0f},
    {false, false, 37, 29, 53, 0, 1.0f, 0.0f},  {false, false, 40, 24, 72, 0, 1.0f, 1.0f},
    {true, false, 53, 29, 37, 0, 1.0f, 1.0f},   {false, true, 32, 32, 16, 40, 0.25f, 0.0f},
    {false, false, 32, 16, 32, 40, 1.0f, 0.0f}, {true, false, 32, 16, 32, 40, 1.0f, 1.0f},
    {true, true, 19, 23, 31, 3, 1.0f, 0.0f},    {false, true, 256, 192, 128, 0, 1.0f, 1.0f},
};

struct Problem {
  Gemm g;
  std::vector<float> a, b, c0;
};

std::vector<float> random_values(int64_t n, uint64_t stream, bool round_to_bf16) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float x = 2.0f * bits_to_unit(Philox::block(make_key(51, stream, 0), 0, uint64_t(i))[0]) - 1.0f;
    v[size_t(i)] = round_to_bf16 ? round_bf16(x) : x;
  }
  return v;
}

Problem make(const Case& c, bool bf16_values) {
  Problem p;
  Gemm& g = p.g;
  g.trans_a = c.ta, g.trans_b = c.tb, g.M = c.M, g.N = c.N, g.K = c.K, g.alpha = c.alpha, g.beta = c.beta;
  g.lda = (c.ta ? c.M : c.K) + c.pad;
  g.ldb = (c.tb ? c.K : c.N) + c.pad;
  g.ldc = c.N + c.pad;
  p.a = random_values((c.ta ? c.K : c.M) * g.lda, 1, bf16_values);
  p.b = random_values((c.tb ? c.N : c.K) * g.ldb, 2, bf16_values);
  p.c0 = random_values(c.M * g.ldc, 3, false);
  g.A = p.a.data(), g.B = p.b.data();
  return p;
}

float at_a(const Problem& p, int64_t m, int64_t k) {
  return p.g.trans_a ? p.a[size_t(k * p.g.lda + m)] : p.a[size_t(m * p.g.lda + k)];
}
float at_b(const Problem& p, int64_t k, int64_t n) {
  return p.g.trans_b ? p.b[size_t(n * p.g.ldb + k)] : p.b[size_t(k * p.g.ldb + n)];
}

std::vector<float> run(Problem& p, void (*f)(const Gemm&, Precision), Precision operands) {
  std::vector<float> c = p.c0;
  p.g.C = c.data();
  f(p.g, operands);
  return c;
}
void openblas(const Gemm& g, Precision) { gemm_openblas(g); }

// |x - y| <= rel * sum_k |alpha a_mk b_kn| + 2^-23 |beta c| per element, and the padding untouched.
void expect_close(const Problem& p, const std::vector<float>& x, const std::vector<float>& y, double rel,
                  const std::string& what) {
  int bad = 0;
  for (int64_t m = 0; m < p.g.M; ++m)
    for (int64_t n = 0; n < p.g.ldc; ++n) {
      const size_t i = size_t(m * p.g.ldc + n);
      if (n >= p.g.N) {
        EXPECT_EQ(x[i], p.c0[i]) << what << ": the padding at " << m << "," << n << " changed";
        continue;
      }
      double mass = 0.0;
      for (int64_t k = 0; k < p.g.K; ++k) mass += std::fabs(double(at_a(p, m, k)) * at_b(p, k, n));
      const double bound = rel * std::fabs(p.g.alpha) * mass + 0x1p-23 * std::fabs(p.g.beta * p.c0[i]) + 1e-30;
      if (std::fabs(double(x[i]) - y[i]) > bound && ++bad <= 3)
        ADD_FAILURE() << what << ": element " << m << "," << n << ": " << x[i] << " vs " << y[i] << " (bound "
                      << bound << ")";
    }
  EXPECT_EQ(bad, 0) << what;
}

std::string name(const Case& c) {
  return std::string(c.ta ? "T" : "N") + (c.tb ? "T" : "N") + " " + std::to_string(c.M) + "x" +
         std::to_string(c.N) + "x" + std::to_string(c.K) + " pad " + std::to_string(c.pad) + " alpha " +
         std::to_string(c.alpha) + " beta " + std::to_string(c.beta);
}

// Two fp32 sums of the same K products each lie within K u sum|ab| of the exact sum (u = 2^-24).
double fp32_reassociation(int64_t K) { return 2.0 * double(K + 2) * 0x1p-24; }

#define REQUIRE_ONEDNN()                                                                        \
  do {                                                                                          \
    std::string why;                                                                            \
    if (!onednn_available(&why)) GTEST_SKIP() << "oneDNN did not load (" << why << "): skipped"; \
  } while (0)

TEST(CpuGemm, OneDnnFp32MatchesOpenBlas) {
  REQUIRE_ONEDNN();
  for (const Case& c : kCases) {
    Problem p = make(c, false);
    const auto ref = run(p, openblas, Precision::Fp32);
    const auto got = run(p, gemm_onednn, Precision::Fp32);
    expect_close(p, got, ref, fp32_reassociation(c.K), "fp32 " + name(c));
  }
}

TEST(CpuGemm, OneDnnBf16OnBf16ValuesIsTheFp32ProductUpToSummationOrder) {
  REQUIRE_ONEDNN();
  if (!cpu_has_avx512_bf16()) GTEST_SKIP() << "this CPU has no AVX512_BF16: the bf16 GEMM is not used, skipped";
  for (const Case& c : kCases) {
    Problem p = make(c, true);  // operands that are bf16 values: each product is exact in fp32
    const auto ref = run(p, openblas, Precision::Fp32);
    const auto got = run(p, gemm_onednn, Precision::Bf16);
    expect_close(p, got, ref, fp32_reassociation(c.K), "bf16 values " + name(c));
  }
}

TEST(CpuGemm, OneDnnBf16RoundsOtherOperandsToNearest) {
  REQUIRE_ONEDNN();
  if (!cpu_has_avx512_bf16()) GTEST_SKIP() << "this CPU has no AVX512_BF16: the bf16 GEMM is not used, skipped";
  for (const Case& c : kCases) {
    Problem p = make(c, false);
    // Each operand moves by at most 2^-9 of itself (nearest bf16), a product by (1 + 2^-9)^2 - 1.
    const double bf16_rounding = 2.0 * 0x1p-9 + 0x1p-18;
    const auto ref = run(p, openblas, Precision::Fp32);
    const auto got = run(p, gemm_onednn, Precision::Bf16);
    expect_close(p, got, ref, bf16_rounding + fp32_reassociation(c.K), "bf16 rounding " + name(c));
    // And exactly the rounded operands' fp32 product (up to order): rounding is to nearest.
    Problem r = p;  // (its A and B are set to its own copies below)
    for (float& x : r.a) x = round_bf16(x);
    for (float& x : r.b) x = round_bf16(x);
    r.g.A = r.a.data(), r.g.B = r.b.data();
    expect_close(r, got, run(r, openblas, Precision::Fp32), fp32_reassociation(c.K), "bf16 nearest " + name(c));
  }
}

// Attention runs its GEMMs from several OpenMP threads at once (one primitive, a scratchpad per thread).
TEST(CpuGemm, OneDnnConcurrentCallsMatchTheTwin) {
  REQUIRE_ONEDNN();
  const Case c{false, true, 64, 64, 32, 8, 0.125f, 0.0f};
  const int kTasks = 16;
  std::vector<Problem> ps;
  for (int t = 0; t < kTasks; ++t) {
    ps.push_back(make(c, false));
    for (float& x : ps.back().a) x *= float(t + 1);
    ps.back().g.A = ps.back().a.data(), ps.back().g.B = ps.back().b.data();
  }
  std::vector<std::vector<float>> twin(kTasks), got(kTasks);
  for (int t = 0; t < kTasks; ++t) twin[size_t(t)] = run(ps[size_t(t)], openblas, Precision::Fp32);
  std::vector<Problem> copies = ps;
  for (Problem& p : copies) p.g.A = p.a.data(), p.g.B = p.b.data();
#pragma omp parallel for num_threads(4) schedule(static, 1)
  for (int t = 0; t < kTasks; ++t) got[size_t(t)] = run(copies[size_t(t)], gemm_onednn, Precision::Fp32);
  for (int t = 0; t < kTasks; ++t)
    expect_close(ps[size_t(t)], got[size_t(t)], twin[size_t(t)], fp32_reassociation(c.K), "task " + std::to_string(t));
}

// linear_backward's pair: dX = dY W (NN) and dW += dY^T X (TN, beta 1) read one dY, which the
// bf16 path converts once for both; the results are those of the two products run alone, bit
// for bit (the same bf16 values, the same primitives), and the padding stays untouched.
TEST(CpuGemm, OneDnnBf16PairSharingAEqualsTheTwoProductsAlone) {
  REQUIRE_ONEDNN();
  if (!cpu_has_avx512_bf16()) GTEST_SKIP() << "this CPU has no AVX512_BF16: the bf16 GEMM is not used, skipped";
  const int64_t N = 48, C = 40, OC = 72, pad = 5;
  const std::vector<float> dy = random_values(N * (OC + pad), 11, false);  // not bf16 values: rounding included
  const std::vector<float> w = random_values(OC * C, 12, true), x = random_values(N * C, 13, true);
  const std::vector<float> dx0 = random_values(N * C, 14, false), dw0 = random_values(OC * C, 15, false);
  const Gemm dx_product{false, false, N, C, OC, 1.0f, dy.data(), OC + pad, w.data(), C, 1.0f, nullptr, C};
  const Gemm dw_product{true, false, OC, C, N, 1.0f, dy.data(), OC + pad, x.data(), C, 1.0f, nullptr, C};
  std::vector<float> dx_alone = dx0, dw_alone = dw0, dx_pair = dx0, dw_pair = dw0;
  Gemm g1 = dx_product, g2 = dw_product;
  g1.C = dx_alone.data(), g2.C = dw_alone.data();
  gemm_onednn(g1, Precision::Bf16);
  gemm_onednn(g2, Precision::Bf16);
  g1.C = dx_pair.data(), g2.C = dw_pair.data();
  gemm_onednn_bf16_sharing_a(g1, g2);
  EXPECT_EQ(dx_pair, dx_alone);
  EXPECT_EQ(dw_pair, dw_alone);
  EXPECT_NE(dx_pair, dx0);
  // The dispatch takes the shared conversion wherever bf16 products run (elsewhere it runs
  // gemm() twice: CpuGemm's other tests cover those products).
  if (cpu_gemm_uses_bf16()) {
    std::vector<float> dx_dispatch = dx0, dw_dispatch = dw0;
    g1.C = dx_dispatch.data(), g2.C = dw_dispatch.data();
    gemm_pair_sharing_a(g1, g2, Precision::Bf16);
    EXPECT_EQ(dx_dispatch, dx_pair);
    EXPECT_EQ(dw_dispatch, dw_pair);
  }
  // Two products over different matrices are not a pair.
  Gemm other = g2;
  other.A = x.data(), other.lda = C;
  EXPECT_THROW(gemm_onednn_bf16_sharing_a(g1, other), Error);
}

double max_abs_difference(const std::vector<float>& x, const std::vector<float>& y, double* scale) {
  double d = 0.0, m = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    d = std::max(d, std::fabs(double(x[i]) - y[i]));
    m = std::max(m, std::fabs(double(y[i])));
  }
  *scale = m;
  return d;
}

// Attention in --bf16: q, k, v and dY hold bf16 values, so QK^T and dY V^T in bf16 products give
// the fp32 attention up to the order of sums (the probabilities' and dS's products stay fp32).
// With q, k, v that are not bf16 values the bf16 products round them: a larger difference,
// which shows the bf16 products ran.
TEST(CpuGemm, AttentionWithBf16OperandsIsTheFp32AttentionOnBf16Values) {
  if (!cpu_gemm_uses_bf16()) GTEST_SKIP() << "no bf16 products on this run (oneDNN or AVX512_BF16 missing): skipped";
  const int64_t B = 2, T = 24, H = 3, D = 16;
  AttentionShape fp32{B, T, H, D, 0, H}, bf16 = fp32;
  bf16.operands = Precision::Bf16;
  const Dropout none{};
  for (bool bf16_values : {true, false}) {
    const std::vector<float> qkv = random_values(B * T * fp32.qkv_width(), 21, bf16_values);
    const std::vector<float> dout = random_values(B * T * H * D, 22, bf16_values);
    std::vector<float> out_f(size_t(B * T * H * D)), out_b(out_f.size()), probs_f(size_t(B * H * T * T)),
        probs_b(probs_f.size());
    attention_forward(out_f.data(), probs_f.data(), nullptr, qkv.data(), fp32, none);
    attention_forward(out_b.data(), probs_b.data(), nullptr, qkv.data(), bf16, none);
    std::vector<float> dqkv_f(qkv.size()), dqkv_b(qkv.size());
    attention_backward(dqkv_f.data(), dout.data(), qkv.data(), probs_f.data(), nullptr, fp32, none);
    attention_backward(dqkv_b.data(), dout.data(), qkv.data(), probs_b.data(), nullptr, bf16, none);
    double scale_out = 0, scale_dqkv = 0;
    const double d_out = max_abs_difference(out_b, out_f, &scale_out);
    const double d_dqkv = max_abs_difference(dqkv_b, dqkv_f, &scale_dqkv);
    if (bf16_values) {
      EXPECT_LE(d_out, 1e-5 * scale_out) << "forward";
      EXPECT_LE(d_dqkv, 1e-5 * scale_dqkv) << "backward";
    } else {
      EXPECT_GT(d_out, 1e-4 * scale_out) << "forward: the bf16 products did not run";
    }
  }
}

TEST(CpuGemm, DescriptionNamesThePath) {
  const std::string d = cpu_gemm_description(Precision::Bf16);
  if (cpu_gemm_path() == CpuGemmPath::OneDnn) {
    EXPECT_NE(d.find("onednn 2."), std::string::npos) << d;
    EXPECT_NE(d.find(cpu_has_avx512_bf16() ? "fp32 accumulation" : "no AVX512_BF16"), std::string::npos) << d;
  } else {
    EXPECT_EQ(d.rfind("openblas", 0), 0u) << d;
  }
}

}  // namespace
}  // namespace occ::kernels
