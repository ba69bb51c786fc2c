#pragma once
// The cuBLASLt descriptors of one problem (an LtKey, lt_problem.h): the
// operation (compute and scale type, transposes, epilogue with its vector and
// aux-matrix attributes) and the layouts of A, B and D (C is D, with D's
// layout). cuBLASLt makes and checks these without a handle or a GPU, so the
// tests read every attribute back on any machine that has the library.
// C++17 and no device syntax.
#include <cublasLt.h>

#include "core/precision.h"
#include "kernels/cuda/lt_problem.h"

namespace occ::kernels::cuda {

// Throws occ::Error naming the call, the status and where (cuda_error.cpp's format).
[[noreturn]] void throw_cublaslt_error(const char* call, cublasStatus_t status, const char* file, int line);

#define OCC_CUBLASLT_CHECK(expr)                                                                           \
  do {                                                                                                     \
    const cublasStatus_t occ_s_ = (expr);                                                                  \
    if (occ_s_ != CUBLAS_STATUS_SUCCESS)                                                                   \
      ::occ::kernels::cuda::throw_cublaslt_error(#expr, occ_s_, __FILE__, __LINE__);                       \
  } while (0)

cudaDataType lt_data_type(Precision p);  // CUDA_R_16BF, CUDA_R_16F or CUDA_R_32F
cublasLtEpilogue_t lt_epilogue(LtEpilogue e);

class LtDescriptors {
 public:
  // vector / aux: the epilogue's pointers (the first call's), whose values the
  // heuristic reads for their alignment; ignored where the epilogue has none.
  LtDescriptors(const LtKey& key, const void* vector, const void* aux);
  ~LtDescriptors();
  LtDescriptors(const LtDescriptors&) = delete;
  LtDescriptors& operator=(const LtDescriptors&) = delete;

  // The epilogue's pointers for the next cublasLtMatmul (every call sets its own).
  void set_pointers(const void* vector, const void* aux);

  const LtKey& key() const { return key_; }
  cublasLtMatmulDesc_t operation() const { return op_; }
  cublasLtMatrixLayout_t a() const { return a_; }
  cublasLtMatrixLayout_t b() const { return b_; }
  cublasLtMatrixLayout_t d() const { return d_; }

 private:
  void build(const void* vector, const void* aux);
  void release();

  LtKey key_;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
};

}  // namespace occ::kernels::cuda
