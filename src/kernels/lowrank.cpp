// The dense linear algebra of low-rank compression on the CPU: OpenBLAS and
// LAPACK (kernels.h). The CUDA twins are in kernels/cuda/lowrank.cu.
#include <cblas.h>
#include <lapacke.h>

#include <vector>

#include "core/error.h"
#include "kernels/kernels.h"

namespace occ::kernels {

void matmul(float* c, const float* a, const float* b, int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b) {
  if (M <= 0 || N <= 0) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, int(M), int(N),
              int(K), 1.0f, a, int(trans_a ? M : K), b, int(trans_b ? K : N), 0.0f, c, int(N));
}

void orthonormalize_columns(float* a, int64_t n, int64_t k) {
  if (k == 0) return;
  std::vector<float> tau(static_cast<size_t>(k));
  int info = LAPACKE_sgeqrf(LAPACK_ROW_MAJOR, int(n), int(k), a, int(k), tau.data());
  OCC_CHECK(info == 0, "internal: QR factorisation failed (LAPACK info {})", info);
  info = LAPACKE_sorgqr(LAPACK_ROW_MAJOR, int(n), int(k), int(k), a, int(k), tau.data());
  OCC_CHECK(info == 0, "internal: QR orthonormalisation failed (LAPACK info {})", info);
}

void axpy(float* y, float alpha, const float* x, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

}  // namespace occ::kernels
