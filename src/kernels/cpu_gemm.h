#pragma once
// The CPU's matrix products (issue 51): every GEMM of the linear layers and of
// attention goes through gemm(), which runs it on oneDNN's matmul when libdnnl
// loads (dlopen at first use: the binary does not link it, so the GPU bundle can
// leave it out) and on OpenBLAS otherwise. OpenBLAS is also the twin the oneDNN
// path is tested against (tests/unit/test_cpu_gemm.cpp).
//
// Operands: with `operands` = Bf16 the fp32 inputs already hold bf16 values (the
// --bf16 step rounds what it stores, core/precision.h); on a CPU with
// AVX512_BF16 oneDNN multiplies them in bf16 with fp32 accumulation (each
// product is exact in fp32: the result is the fp32 product up to the order of
// sums, the GPU's tensor-core contract). Elsewhere, or on OpenBLAS, they
// multiply in fp32.
//
// OCC_CPU_GEMM=auto (default) | openblas | onednn picks the library (read once;
// onednn where libdnnl does not load is a one-line error; any other value too).
// OCC_ONEDNN_LIBRARY=PATH loads that file instead of libdnnl.so.2.
#include <cstdint>
#include <string>

#include "core/precision.h"

namespace occ::kernels {

// Row-major C[M, N] = alpha op(A)[M, K] op(B)[K, N] + beta C, op(X) = X or X^T
// (A is stored [K, M] when trans_a, B [N, K] when trans_b), as cblas_sgemm.
struct Gemm {
  bool trans_a = false, trans_b = false;
  int64_t M = 0, N = 0, K = 0;
  float alpha = 1.0f;
  const float* A = nullptr;
  int64_t lda = 0;
  const float* B = nullptr;
  int64_t ldb = 0;
  float beta = 0.0f;
  float* C = nullptr;
  int64_t ldc = 0;
};

enum class CpuGemmPath { OpenBlas, OneDnn };

// The dispatch: the run's path (OCC_CPU_GEMM), bf16 operands where supported.
void gemm(const Gemm& g, Precision operands = Precision::Fp32);
// Two products that read the same A (one pointer and leading dimension, the same
// stored rows x columns; the transposition may differ): with bf16 operands on
// oneDNN, A is converted to bf16 once for both (linear_backward's dY feeds dX and
// dW). Elsewhere gemm(g1, operands) then gemm(g2, operands); the results are the same.
void gemm_pair_sharing_a(const Gemm& g1, const Gemm& g2, Precision operands = Precision::Fp32);
// The twin: cblas_sgemm (fp32 products whatever the operands).
void gemm_openblas(const Gemm& g);
// oneDNN directly: fp32 operands, or bf16 ones (the inputs rounded to bf16,
// nearest-even: exact for values already in bf16). Fails when oneDNN did not
// load or (bf16) the CPU lacks AVX512_BF16: check the two below first.
void gemm_onednn(const Gemm& g, Precision operands);
// gemm_pair_sharing_a's bf16 oneDNN case (the same preconditions as gemm_onednn with Bf16).
void gemm_onednn_bf16_sharing_a(const Gemm& g1, const Gemm& g2);

// libdnnl loaded (first call tries); why_not gets the loader's reasons when not.
bool onednn_available(std::string* why_not = nullptr);
// "2.6.3" of the loaded library ("" when none).
std::string onednn_version();
// The implementation oneDNN picks for an NT problem (linear_forward's layout), e.g. "brg:avx512_core".
std::string onednn_impl(int64_t M, int64_t N, int64_t K, bool bf16);
// The CPU has AVX512_BF16 (vdpbf16ps) and the OS saves the AVX-512 state.
bool cpu_has_avx512_bf16();

CpuGemmPath cpu_gemm_path();
// Whether gemm() multiplies `operands` = Bf16 in bf16 on this run.
bool cpu_gemm_uses_bf16();
// What ran, for bench and the run's start line: e.g. "onednn 2.6.3 (fp32 brg:avx512_core; bf16 operands:
// brg:avx512_core_bf16)" or "openblas (OCC_CPU_GEMM=openblas)".
std::string cpu_gemm_description(Precision step);

}  // namespace occ::kernels
