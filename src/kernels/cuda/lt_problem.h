#pragma once
// The host-only half of the cuBLASLt linear layers (lt_matmul.h): how each
// row-major product of a linear layer becomes one column-major GEMM, and the
// key under which LtMatmul caches a planned GEMM (descriptors and the chosen
// algorithm). No CUDA types and no CUDA headers, so the unit tests check all of
// it on a machine without a GPU (tests/unit/test_lt_problem.cpp). C++17, as
// the .cu files of the backend are compiled.
//
// cuBLASLt is column-major (CUBLASLT_ORDER_COL, its default). A row-major
// X[R, K] whose rows are K elements apart is, byte for byte, the column-major
// matrix X^T[K, R] with leading dimension K. So a row-major product Y = A B is
// issued as Y^T = B^T A^T, and "transpose" below always refers to the stored
// column-major view of a buffer.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/precision.h"

namespace occ::kernels::cuda {

// The epilogues LtMatmul fuses into a GEMM (lt_matmul.cpp maps each to its
// cublasLtEpilogue_t). "Rows" and "columns" are those of the column-major D.
enum class LtEpilogue : uint8_t {
  None,         // D = op(A) op(B) + beta C                                      (CUBLASLT_EPILOGUE_DEFAULT)
  Bias,         // D = op(A) op(B) + bias[row]                                     (BIAS)
  GeluAux,      // aux = op(A) op(B); D = gelu(that)                               (GELU_AUX)
  GeluAuxBias,  // aux = op(A) op(B) + bias[row]; D = gelu(that)                   (GELU_AUX_BIAS)
  DGelu,        // D = op(A) op(B) * gelu'(aux)                                    (DGELU)
  DGeluBGrad,   // as DGelu, and vector[row] = sum over D's columns of that D      (DGELU_BGRAD)
  BGradB,       // D = op(A) op(B) + beta C, and vector[col] = sum over k of op(B) (BGRADB)
};

inline const char* epilogue_name(LtEpilogue e) {
  switch (e) {
    case LtEpilogue::None: return "DEFAULT";
    case LtEpilogue::Bias: return "BIAS";
    case LtEpilogue::GeluAux: return "GELU_AUX";
    case LtEpilogue::GeluAuxBias: return "GELU_AUX_BIAS";
    case LtEpilogue::DGelu: return "DGELU";
    case LtEpilogue::DGeluBGrad: return "DGELU_BGRAD";
    case LtEpilogue::BGradB: return "BGRADB";
  }
  return "?";
}
// Whether the epilogue reads or writes a vector (bias, bias gradient) / an aux matrix.
constexpr bool has_vector(LtEpilogue e) {
  return e == LtEpilogue::Bias || e == LtEpilogue::GeluAuxBias || e == LtEpilogue::DGeluBGrad ||
         e == LtEpilogue::BGradB;
}
constexpr bool has_aux(LtEpilogue e) {
  return e == LtEpilogue::GeluAux || e == LtEpilogue::GeluAuxBias || e == LtEpilogue::DGelu ||
         e == LtEpilogue::DGeluBGrad;
}

// One column-major GEMM: D[m, n] = op(A)[m, k] op(B)[k, n] (+ beta C, with C == D).
// The stored (pre-op) matrices are what cuBLASLt's layouts describe: A is
// a_rows() x a_cols() with leading dimension lda, likewise B; D is m x n, ldd.
struct ColumnMajorGemm {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int64_t lda = 0, ldb = 0, ldd = 0;

  int64_t a_rows() const { return trans_a ? k : m; }
  int64_t a_cols() const { return trans_a ? m : k; }
  int64_t b_rows() const { return trans_b ? n : k; }
  int64_t b_cols() const { return trans_b ? k : n; }
};
inline bool operator==(const ColumnMajorGemm& x, const ColumnMajorGemm& y) {
  return x.m == y.m && x.n == y.n && x.k == y.k && x.trans_a == y.trans_a && x.trans_b == y.trans_b &&
         x.lda == y.lda && x.ldb == y.ldb && x.ldd == y.ldd;
}
inline ColumnMajorGemm column_major_gemm(int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b, int64_t lda,
                                         int64_t ldb, int64_t ldd) {
  ColumnMajorGemm g;
  g.m = m, g.n = n, g.k = k, g.trans_a = trans_a, g.trans_b = trans_b, g.lda = lda, g.ldb = ldb, g.ldd = ldd;
  return g;
}

// The three products of a linear layer with kernels/kernels.h's row-major
// semantics (inp[N, C], w[OC, C], out[N, OC]):
//
// forward:  out[N, OC] = inp w^T.  Column-major: out^T[OC, N] = (w^T)^T inp^T, so
//   A = w   (stored as w^T [C, OC], ld C, op T),  B = inp (stored as inp^T [C, N], ld C, op N),
//   D = out (out^T [OC, N], ld OC);  m = OC, n = N, k = C.  A bias per out column
//   is a bias per row of D: the BIAS epilogue's broadcast.
inline ColumnMajorGemm forward_gemm(int64_t N, int64_t C, int64_t OC) {
  return column_major_gemm(/*m=*/OC, /*n=*/N, /*k=*/C, /*trans_a=*/true, /*trans_b=*/false, /*lda=*/C, /*ldb=*/C,
                           /*ldd=*/OC);
}
// backward, input: dinp[N, C] = dout w.  Column-major: dinp^T[C, N] = w^T dout^T, so
//   A = w   (w^T [C, OC], ld C, op N),  B = dout (dout^T [OC, N], ld OC, op N),
//   D = dinp (dinp^T [C, N], ld C);  m = C, n = N, k = OC.  The bias gradient of
//   dinp's columns (DGELU_BGRAD) is the sum over D's columns, one value per row of D.
inline ColumnMajorGemm backward_input_gemm(int64_t N, int64_t C, int64_t OC) {
  return column_major_gemm(/*m=*/C, /*n=*/N, /*k=*/OC, /*trans_a=*/false, /*trans_b=*/false, /*lda=*/C, /*ldb=*/OC,
                           /*ldd=*/C);
}
// backward, weight: dw[OC, C] += dout^T inp.  Column-major: dw^T[C, OC] += inp^T dout, so
//   A = inp (inp^T [C, N], ld C, op N),  B = dout (dout^T [OC, N], ld OC, op T: dout [N, OC]),
//   D = dw  (dw^T [C, OC], ld C);  m = C, n = OC, k = N.  dbias[OC] = column sums of dout
//   = for each column of D, the sum over k of op(B): the BGRADB epilogue.
inline ColumnMajorGemm backward_weight_gemm(int64_t N, int64_t C, int64_t OC) {
  return column_major_gemm(/*m=*/C, /*n=*/OC, /*k=*/N, /*trans_a=*/false, /*trans_b=*/true, /*lda=*/C, /*ldb=*/OC,
                           /*ldd=*/C);
}

// The alignment, in bytes, that a buffer at this address guarantees: the
// largest power of two dividing it, capped at 256 (cuBLASLt's default
// assumption, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES). nullptr: 256.
inline uint32_t alignment_of(uintptr_t address) {
  if (address == 0) return 256;
  uint32_t a = 1;
  while (a < 256 && (address & a) == 0) a <<= 1;
  return a;
}
inline uint32_t alignment_of(const void* p) { return alignment_of(reinterpret_cast<uintptr_t>(p)); }

// Everything cuBLASLt's heuristic sees of a problem: the GEMM, the data types,
// the epilogue with its vector and aux matrix, and the alignment of every
// pointer (the heuristic reads the bias and aux pointers' values to know their
// alignment, and the preference states A's, B's and D's). Two calls with equal
// keys can share descriptors and an algorithm; alpha and beta are per call.
// Fields that a problem does not use hold fixed values (make_key), so equal
// problems give equal keys.
struct LtKey {
  ColumnMajorGemm gemm;
  Precision operands = Precision::Bf16;  // A and B
  Precision output = Precision::Fp32;    // C and D
  LtEpilogue epilogue = LtEpilogue::None;
  Precision vector_format = Precision::Fp32;  // the bias or bias gradient; Fp32 when has_vector() is false
  Precision aux_format = Precision::Fp32;     // the aux matrix; Fp32 when has_aux() is false
  int64_t aux_ld = 0;                         // 0 when has_aux() is false
  uint32_t align_a = 256, align_b = 256, align_d = 256, align_vector = 256, align_aux = 256;
};
inline bool operator==(const LtKey& x, const LtKey& y) {
  return x.gemm == y.gemm && x.operands == y.operands && x.output == y.output && x.epilogue == y.epilogue &&
         x.vector_format == y.vector_format && x.aux_format == y.aux_format && x.aux_ld == y.aux_ld &&
         x.align_a == y.align_a && x.align_b == y.align_b && x.align_d == y.align_d &&
         x.align_vector == y.align_vector && x.align_aux == y.align_aux;
}

// The pointers of one call, for their alignment.
struct LtPointers {
  const void* a = nullptr;
  const void* b = nullptr;
  const void* d = nullptr;
  const void* vector = nullptr;
  const void* aux = nullptr;
};

inline LtKey make_key(const ColumnMajorGemm& gemm, Precision operands, Precision output, LtEpilogue epilogue,
                      Precision vector_format, Precision aux_format, int64_t aux_ld, const LtPointers& p) {
  LtKey key;
  key.gemm = gemm;
  key.operands = operands;
  key.output = output;
  key.epilogue = epilogue;
  key.align_a = alignment_of(p.a);
  key.align_b = alignment_of(p.b);
  key.align_d = alignment_of(p.d);
  if (has_vector(epilogue)) {
    key.vector_format = vector_format;
    key.align_vector = alignment_of(p.vector);
  }
  if (has_aux(epilogue)) {
    key.aux_format = aux_format;
    key.aux_ld = aux_ld;
    key.align_aux = alignment_of(p.aux);
  }
  return key;
}

struct LtKeyHash {
  size_t operator()(const LtKey& key) const {
    // FNV-1a over the fields' values (not the struct's bytes: padding is not part of the key).
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](uint64_t v) {
      for (int i = 0; i < 8; ++i, v >>= 8) h = (h ^ (v & 0xffu)) * 1099511628211ull;
    };
    const ColumnMajorGemm& g = key.gemm;
    for (int64_t v : {g.m, g.n, g.k, g.lda, g.ldb, g.ldd, key.aux_ld}) mix(uint64_t(v));
    mix(uint64_t(g.trans_a) | uint64_t(g.trans_b) << 1 | uint64_t(key.operands) << 2 | uint64_t(key.output) << 6 |
        uint64_t(key.epilogue) << 10 | uint64_t(key.vector_format) << 18 | uint64_t(key.aux_format) << 22);
    for (uint32_t a : {key.align_a, key.align_b, key.align_d, key.align_vector, key.align_aux}) mix(a);
    return size_t(h);
  }
};

// One line naming the problem for error messages: shape, transposes, leading
// dimensions, types, epilogue and alignments.
inline std::string describe(const LtKey& key) {
  const ColumnMajorGemm& g = key.gemm;
  const auto i = [](int64_t v) { return std::to_string(v); };
  std::string s = "column-major GEMM m=" + i(g.m) + " n=" + i(g.n) + " k=" + i(g.k) + ", A " +
                  precision_name(key.operands) + (g.trans_a ? " op T" : " op N") + " ld " + i(g.lda) + ", B " +
                  precision_name(key.operands) + (g.trans_b ? " op T" : " op N") + " ld " + i(g.ldb) + ", C/D " +
                  precision_name(key.output) + " ld " + i(g.ldd) + ", epilogue " + epilogue_name(key.epilogue);
  if (has_vector(key.epilogue)) s += std::string(", vector ") + precision_name(key.vector_format);
  if (has_aux(key.epilogue)) s += std::string(", aux ") + precision_name(key.aux_format) + " ld " + i(key.aux_ld);
  s += ", alignment A/B/D " + i(key.align_a) + "/" + i(key.align_b) + "/" + i(key.align_d);
  if (has_vector(key.epilogue)) s += " vector " + i(key.align_vector);
  if (has_aux(key.epilogue)) s += " aux " + i(key.align_aux);
  return s + " bytes";
}

// Why a fused epilogue cannot serve this problem, from cuBLASLt's documented
// constraints alone (nullptr: nothing rules it out, and the heuristic decides).
// `accumulate`: beta = 1.
inline const char* fusion_ruled_out(const LtKey& key, bool accumulate) {
  const LtEpilogue e = key.epilogue;
  if (e == LtEpilogue::None) return nullptr;
  // CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: "must be divisible by 8" for the GELU input matrix.
  if (has_aux(e) && key.aux_ld % 8 != 0) return "the GELU aux matrix's leading dimension is not a multiple of 8";
  // The epilogue acts on alpha op(A) op(B) + beta C: with beta = 1 the old values
  // would pass through the GELU gradient (and the bias gradient) too.
  if ((e == LtEpilogue::DGelu || e == LtEpilogue::DGeluBGrad) && accumulate)
    return "accumulating onto the output would put its old values through the GELU gradient";
  if (key.gemm.k == 0) return "k = 0 (no product to fuse into)";
  return nullptr;
}

}  // namespace occ::kernels::cuda
