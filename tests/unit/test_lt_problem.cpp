// The host-only logic of the cuBLASLt linear layers (kernels/cuda/lt_problem.h),
// checked without a GPU: each row-major linear-layer product, issued as the
// column-major GEMM and epilogue that lt_matmul.cpp hands cuBLASLt, computed
// here by a plain column-major GEMM with cuBLASLt's documented epilogue
// semantics, must equal the CPU kernels (kernels/kernels.h); and the plan
// cache's key must tell apart exactly the problems the heuristic could.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/rng.h"
#include "kernels/cuda/lt_problem.h"
#include "kernels/kernels.h"

namespace occ::kernels::cuda {
namespace {

std::vector<float> values(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 2.0f * uniform_at(seed, 3, i) - 1.0f;
  return v;
}

// op(A)[i, p] and op(B)[p, j] of the stored column-major matrices, as cuBLASLt reads them.
float op_a(const ColumnMajorGemm& g, const std::vector<float>& A, int64_t i, int64_t p) {
  return g.trans_a ? A[size_t(p + i * g.lda)] : A[size_t(i + p * g.lda)];
}
float op_b(const ColumnMajorGemm& g, const std::vector<float>& B, int64_t p, int64_t j) {
  return g.trans_b ? B[size_t(j + p * g.ldb)] : B[size_t(p + j * g.ldb)];
}

// D = op(A) op(B) + beta D (column-major, ld ldd), in double for a reference free of
// rounding order. Also checks that the stored matrices fit their buffers exactly.
void column_major_gemm_ref(const ColumnMajorGemm& g, const std::vector<float>& A, const std::vector<float>& B,
                           float beta, std::vector<float>& D) {
  ASSERT_GE(g.lda, g.a_rows());
  ASSERT_GE(g.ldb, g.b_rows());
  ASSERT_GE(g.ldd, g.m);
  ASSERT_EQ(size_t(g.lda * g.a_cols()), A.size());
  ASSERT_EQ(size_t(g.ldb * g.b_cols()), B.size());
  ASSERT_EQ(size_t(g.ldd * g.n), D.size());
  for (int64_t j = 0; j < g.n; ++j)
    for (int64_t i = 0; i < g.m; ++i) {
      double s = 0.0;
      for (int64_t p = 0; p < g.k; ++p) s += double(op_a(g, A, i, p)) * double(op_b(g, B, p, j));
      float& d = D[size_t(i + j * g.ldd)];
      d = float(s + double(beta) * d);
    }
}

void expect_near_all(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double max_ref = 0.0, max_diff = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    max_ref = std::max(max_ref, std::fabs(double(want[i])));
    max_diff = std::max(max_diff, std::fabs(double(got[i]) - double(want[i])));
  }
  EXPECT_LE(max_diff, 1e-5 * std::max(max_ref, 1.0)) << what;
}

using Shape = std::tuple<int64_t, int64_t, int64_t>;
const Shape kShapes[] = {{5, 7, 3}, {37, 50, 29}, {1, 7, 30}, {16, 8, 24}};

// forward: D = out^T with the BIAS epilogue adding bias[row of D] must be inp w^T + bias.
TEST(LtProblem, ForwardGemmAndBiasEpilogueMatchTheCpuKernel) {
  for (auto [N, C, OC] : kShapes) {
    const auto inp = values(size_t(N * C), 1), w = values(size_t(OC * C), 2), bias = values(size_t(OC), 3);
    std::vector<float> want(size_t(N * OC));
    linear_forward(want.data(), inp.data(), w.data(), bias.data(), N, C, OC);

    const ColumnMajorGemm g = forward_gemm(N, C, OC);
    std::vector<float> out(size_t(N * OC), 7.0f);
    column_major_gemm_ref(g, /*A=*/w, /*B=*/inp, 0.0f, out);
    // CUBLASLT_EPILOGUE_BIAS: the vector has D's row count and is broadcast over its columns.
    ASSERT_EQ(g.m, OC);
    for (int64_t j = 0; j < g.n; ++j)
      for (int64_t i = 0; i < g.m; ++i) out[size_t(i + j * g.ldd)] += bias[size_t(i)];
    expect_near_all(out, want, "forward N=" + std::to_string(N));
  }
}

// backward, input: D = dinp^T, accumulating (beta = 1) or not; the DGELU_BGRAD bias
// gradient (one value per row of D, summed over D's columns) must be the column sums of dinp.
TEST(LtProblem, BackwardInputGemmAndBiasGradientMatchTheCpuKernel) {
  for (auto [N, C, OC] : kShapes) {
    for (bool accumulate : {false, true}) {
      const auto dout = values(size_t(N * OC), 4), w = values(size_t(OC * C), 5), old = values(size_t(N * C), 6);
      std::vector<float> want = old, dw(size_t(OC * C)), unused(size_t(N * C));
      linear_backward(want.data(), dw.data(), nullptr, dout.data(), unused.data(), w.data(), N, C, OC, accumulate);

      const ColumnMajorGemm g = backward_input_gemm(N, C, OC);
      std::vector<float> dinp = old;
      column_major_gemm_ref(g, /*A=*/w, /*B=*/dout, accumulate ? 1.0f : 0.0f, dinp);
      expect_near_all(dinp, want, "backward input N=" + std::to_string(N) + " acc=" + std::to_string(accumulate));

      ASSERT_EQ(g.m, C);
      std::vector<float> bgrad(size_t(g.m), 0.0f), col_sums(size_t(C), 0.0f);
      for (int64_t j = 0; j < g.n; ++j)
        for (int64_t i = 0; i < g.m; ++i) bgrad[size_t(i)] += dinp[size_t(i + j * g.ldd)];
      for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c) col_sums[size_t(c)] += dinp[size_t(n * C + c)];
      expect_near_all(bgrad, col_sums, "DGELU_BGRAD vector N=" + std::to_string(N));
    }
  }
}

// backward, weight: D = dw^T accumulating onto its old values (beta = 1); the BGRADB
// gradient (one value per column of D, summed over k of op(B)) must be dbias += column sums of dout.
TEST(LtProblem, BackwardWeightGemmAndBGradBMatchTheCpuKernel) {
  for (auto [N, C, OC] : kShapes) {
    const auto dout = values(size_t(N * OC), 7), inp = values(size_t(N * C), 8);
    const auto dw_old = values(size_t(OC * C), 9), dbias_old = values(size_t(OC), 10);
    std::vector<float> want_dw = dw_old, want_dbias = dbias_old, w(size_t(OC * C));
    linear_backward(nullptr, want_dw.data(), want_dbias.data(), dout.data(), inp.data(), w.data(), N, C, OC);

    const ColumnMajorGemm g = backward_weight_gemm(N, C, OC);
    std::vector<float> dw = dw_old;
    column_major_gemm_ref(g, /*A=*/inp, /*B=*/dout, 1.0f, dw);
    expect_near_all(dw, want_dw, "backward weight N=" + std::to_string(N));

    ASSERT_EQ(g.n, OC);
    std::vector<float> dbias = dbias_old;
    for (int64_t j = 0; j < g.n; ++j) {
      double s = 0.0;
      for (int64_t p = 0; p < g.k; ++p) s += op_b(g, dout, p, j);
      dbias[size_t(j)] += float(s);  // the fused vector is added onto dbias afterwards
    }
    expect_near_all(dbias, want_dbias, "BGRADB vector N=" + std::to_string(N));
  }
}

TEST(LtProblem, AlignmentIsTheLargestPowerOfTwoUpTo256) {
  EXPECT_EQ(alignment_of(uintptr_t(0)), 256u);  // no pointer: nothing to constrain
  EXPECT_EQ(alignment_of(uintptr_t(1)), 1u);
  EXPECT_EQ(alignment_of(uintptr_t(2)), 2u);
  EXPECT_EQ(alignment_of(uintptr_t(6)), 2u);
  EXPECT_EQ(alignment_of(uintptr_t(24)), 8u);
  EXPECT_EQ(alignment_of(uintptr_t(0x7f0000000010)), 16u);
  EXPECT_EQ(alignment_of(uintptr_t(0x7f0000000100)), 256u);
  EXPECT_EQ(alignment_of(uintptr_t(0x7f0000001000)), 256u);
  EXPECT_EQ(alignment_of(uintptr_t(0x7f0000000180)), 128u);
}

// Pointers with chosen alignments.
const void* at(uintptr_t address) { return reinterpret_cast<const void*>(address); }

LtKey base_key(LtEpilogue e, const LtPointers& p) {
  return make_key(forward_gemm(64, 768, 2304), Precision::Bf16, Precision::Bf16, e, Precision::Bf16, Precision::Bf16,
                  2304, p);
}

TEST(LtProblem, KeysOfEqualProblemsAreEqualWhateverTheUnusedFields) {
  const LtPointers p{at(0x1000), at(0x2000), at(0x3000), at(0x4000), at(0x5000)};
  const LtPointers q{at(0x9100), at(0xa200), at(0xb300), at(0xc400), at(0xd500)};  // other addresses, same alignment
  for (LtEpilogue e : {LtEpilogue::None, LtEpilogue::Bias, LtEpilogue::GeluAuxBias, LtEpilogue::DGeluBGrad}) {
    EXPECT_TRUE(base_key(e, p) == base_key(e, q)) << epilogue_name(e);
    EXPECT_EQ(LtKeyHash{}(base_key(e, p)), LtKeyHash{}(base_key(e, q))) << epilogue_name(e);
  }
  // A problem without a vector or aux matrix ignores their formats, ld and pointers.
  const LtKey plain = base_key(LtEpilogue::None, p);
  const LtKey other = make_key(forward_gemm(64, 768, 2304), Precision::Bf16, Precision::Bf16, LtEpilogue::None,
                               Precision::Fp32, Precision::Fp16, 8, LtPointers{p.a, p.b, p.d, at(0x3), at(0x5)});
  EXPECT_TRUE(plain == other);
  EXPECT_EQ(LtKeyHash{}(plain), LtKeyHash{}(other));
  // BIAS has a vector but no aux matrix; DGELU the reverse.
  const LtKey bias = base_key(LtEpilogue::Bias, p);
  EXPECT_EQ(bias.aux_ld, 0);
  EXPECT_EQ(bias.align_aux, 256u);
  EXPECT_EQ(bias.vector_format, Precision::Bf16);
  const LtKey dgelu = base_key(LtEpilogue::DGelu, LtPointers{p.a, p.b, p.d, at(0x2), p.aux});
  EXPECT_EQ(dgelu.vector_format, Precision::Fp32);
  EXPECT_EQ(dgelu.align_vector, 256u);
  EXPECT_EQ(dgelu.aux_ld, 2304);
}

TEST(LtProblem, KeysTellApartEveryFieldTheHeuristicSees) {
  const LtPointers p{at(0x1000), at(0x2000), at(0x3000), at(0x4000), at(0x5000)};
  const LtKey base = base_key(LtEpilogue::GeluAuxBias, p);
  std::vector<LtKey> variants;
  auto vary = [&](auto change) {
    LtKey k = base;
    change(k);
    variants.push_back(k);
  };
  vary([](LtKey& k) { k.gemm.m += 1; });
  vary([](LtKey& k) { k.gemm.n += 1; });
  vary([](LtKey& k) { k.gemm.k += 1; });
  vary([](LtKey& k) { k.gemm.trans_a = !k.gemm.trans_a; });
  vary([](LtKey& k) { k.gemm.trans_b = !k.gemm.trans_b; });
  vary([](LtKey& k) { k.gemm.lda += 8; });
  vary([](LtKey& k) { k.gemm.ldb += 8; });
  vary([](LtKey& k) { k.gemm.ldd += 8; });
  vary([](LtKey& k) { k.operands = Precision::Fp16; });
  vary([](LtKey& k) { k.output = Precision::Fp32; });
  vary([](LtKey& k) { k.epilogue = LtEpilogue::GeluAux; });
  vary([](LtKey& k) { k.vector_format = Precision::Fp32; });
  vary([](LtKey& k) { k.aux_format = Precision::Fp32; });
  vary([](LtKey& k) { k.aux_ld += 8; });
  vary([](LtKey& k) { k.align_a = 16; });
  vary([](LtKey& k) { k.align_b = 16; });
  vary([](LtKey& k) { k.align_d = 16; });
  vary([](LtKey& k) { k.align_vector = 16; });
  vary([](LtKey& k) { k.align_aux = 16; });
  std::set<size_t> hashes{LtKeyHash{}(base)};
  for (size_t i = 0; i < variants.size(); ++i) {
    EXPECT_FALSE(variants[i] == base) << "variant " << i;
    hashes.insert(LtKeyHash{}(variants[i]));
  }
  EXPECT_EQ(hashes.size(), variants.size() + 1) << "distinct problems should hash apart";
  // Alignment comes from the pointers: a 16-byte-aligned operand is another problem.
  EXPECT_FALSE(base_key(LtEpilogue::GeluAuxBias, LtPointers{at(0x1010), p.b, p.d, p.vector, p.aux}) == base);
  EXPECT_FALSE(base_key(LtEpilogue::GeluAuxBias, LtPointers{p.a, p.b, p.d, p.vector, at(0x5008)}) == base);
}

TEST(LtProblem, FusionIsRuledOutByTheDocumentedConstraintsOnly) {
  const LtPointers p{at(0x1000), at(0x2000), at(0x3000), at(0x4000), at(0x5000)};
  EXPECT_EQ(fusion_ruled_out(base_key(LtEpilogue::GeluAuxBias, p), false), nullptr);
  EXPECT_EQ(fusion_ruled_out(base_key(LtEpilogue::Bias, p), true), nullptr);
  EXPECT_EQ(fusion_ruled_out(base_key(LtEpilogue::None, p), true), nullptr);
  // The GeLU aux matrix's leading dimension must be a multiple of 8.
  const LtKey odd = make_key(forward_gemm(37, 50, 29), Precision::Bf16, Precision::Bf16, LtEpilogue::GeluAuxBias,
                             Precision::Bf16, Precision::Bf16, 29, p);
  EXPECT_NE(fusion_ruled_out(odd, false), nullptr);
  // An odd ld without an aux matrix is the heuristic's to judge.
  const LtKey odd_bias = make_key(forward_gemm(37, 50, 29), Precision::Bf16, Precision::Bf16, LtEpilogue::Bias,
                                  Precision::Bf16, Precision::Bf16, 29, p);
  EXPECT_EQ(fusion_ruled_out(odd_bias, false), nullptr);
  // beta = 1 would put the old values through the GeLU gradient.
  const LtKey dgelu = make_key(backward_input_gemm(64, 3072, 768), Precision::Bf16, Precision::Bf16,
                               LtEpilogue::DGelu, Precision::Fp32, Precision::Bf16, 3072, p);
  EXPECT_EQ(fusion_ruled_out(dgelu, false), nullptr);
  EXPECT_NE(fusion_ruled_out(dgelu, true), nullptr);
}

TEST(LtProblem, DescriptionNamesTheProblem) {
  const LtPointers p{at(0x1000), at(0x2002), at(0x3000), at(0x4000), at(0x5000)};
  const std::string s = describe(make_key(backward_input_gemm(37, 50, 29), Precision::Fp16, Precision::Fp32,
                                          LtEpilogue::DGeluBGrad, Precision::Fp32, Precision::Fp16, 50, p));
  for (const char* part : {"m=50", "n=37", "k=29", "A fp16 op N ld 50", "B fp16 op N ld 29", "C/D fp32 ld 50",
                           "DGELU_BGRAD", "vector fp32", "aux fp16 ld 50", "A/B/D 256/2/256"})
    EXPECT_NE(s.find(part), std::string::npos) << "'" << part << "' missing from: " << s;
}

}  // namespace
}  // namespace occ::kernels::cuda
