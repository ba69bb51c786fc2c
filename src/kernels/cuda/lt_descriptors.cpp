// cuBLASLt descriptors of one problem (lt_descriptors.h).
//
// Attribute types, from <cublasLt.h>'s documentation of each attribute (a
// buffer of another size is refused with CUBLAS_STATUS_INVALID_VALUE, which the
// checks turn into an error naming the call; tests/cuda/test_cuda_lt_matmul.cpp
// reads each one back):
//   MATMUL_DESC_TRANSA / TRANSB            int32_t (cublasOperation_t)
//   MATMUL_DESC_EPILOGUE                   uint32_t (cublasLtEpilogue_t)
//   MATMUL_DESC_BIAS_POINTER               void* (bias: read; bias gradient: written)
//   MATMUL_DESC_BIAS_DATA_TYPE             int32_t (cudaDataType)
//   MATMUL_DESC_EPILOGUE_AUX_POINTER       void*
//   MATMUL_DESC_EPILOGUE_AUX_LD            int64_t, in elements
//   MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE     int32_t (cudaDataType; default -1: D's type)
//   layouts: made by cublasLtMatrixLayoutCreate(type, uint64_t rows, uint64_t cols, int64_t ld)
// Left at their defaults: the pointer mode (host: alpha and beta are host
// floats), the layouts' order (CUBLASLT_ORDER_COL) and batch count (1).
#include "kernels/cuda/lt_descriptors.h"

#include "kernels/cuda/cuda_backend.h"

namespace occ::kernels::cuda {

void throw_cublaslt_error(const char* call, cublasStatus_t status, const char* file, int line) {
  throw_cuda_error(call, cublasLtGetStatusString(status), file, line);
}

cudaDataType lt_data_type(Precision p) {
  return p == Precision::Bf16 ? CUDA_R_16BF : p == Precision::Fp16 ? CUDA_R_16F : CUDA_R_32F;
}

cublasLtEpilogue_t lt_epilogue(LtEpilogue e) {
  switch (e) {
    case LtEpilogue::None: return CUBLASLT_EPILOGUE_DEFAULT;
    case LtEpilogue::Bias: return CUBLASLT_EPILOGUE_BIAS;
    case LtEpilogue::GeluAux: return CUBLASLT_EPILOGUE_GELU_AUX;
    case LtEpilogue::GeluAuxBias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case LtEpilogue::DGelu: return CUBLASLT_EPILOGUE_DGELU;
    case LtEpilogue::DGeluBGrad: return CUBLASLT_EPILOGUE_DGELU_BGRAD;
    case LtEpilogue::BGradB: return CUBLASLT_EPILOGUE_BGRADB;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

namespace {

template <class T>
void set_attribute(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attr, T value) {
  OCC_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(op, attr, &value, sizeof(value)));
}

}  // namespace

LtDescriptors::LtDescriptors(const LtKey& key, const void* vector, const void* aux) : key_(key) {
  try {
    build(vector, aux);
  } catch (...) {
    release();
    throw;
  }
}

LtDescriptors::~LtDescriptors() { release(); }

void LtDescriptors::build(const void* vector, const void* aux) {
  const ColumnMajorGemm& g = key_.gemm;
  // Products and sums in fp32 (CUBLAS_COMPUTE_32F: not the _FAST_TF32 or 16F
  // variants), alpha and beta fp32 (scale type CUDA_R_32F).
  OCC_CUBLASLT_CHECK(cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_attribute<int32_t>(op_, CUBLASLT_MATMUL_DESC_TRANSA, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
  set_attribute<int32_t>(op_, CUBLASLT_MATMUL_DESC_TRANSB, g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
  set_attribute<uint32_t>(op_, CUBLASLT_MATMUL_DESC_EPILOGUE, lt_epilogue(key_.epilogue));
  if (has_vector(key_.epilogue)) {
    // Stated even where it equals the default (D's type, for a bias and a bias
    // gradient alike). The bias gradients are always asked for in D's type (the
    // documented one); a bias may be fp32 beside a 16-bit D, a combination
    // cuBLASLt may refuse (then the epilogue falls back to a kernel).
    set_attribute<int32_t>(op_, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, lt_data_type(key_.vector_format));
  }
  if (has_aux(key_.epilogue)) {
    // The aux matrix's type defaults to D's and is stated only where it differs
    // (fp32 D with a 16-bit pre-activation, which cuBLASLt may refuse likewise).
    if (key_.aux_format != key_.output)
      set_attribute<int32_t>(op_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, lt_data_type(key_.aux_format));
    // In elements: a multiple of 8 (fusion_ruled_out) and >= D's rows (the aux matrix has D's shape).
    set_attribute<int64_t>(op_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, key_.aux_ld);
  }
  set_pointers(vector, aux);
  // The stored matrices (lt_problem.h): A is a_rows x a_cols with ld lda, B likewise,
  // D is m x n with ld ldd; column-major, cuBLASLt's default order.
  OCC_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&a_, lt_data_type(key_.operands), uint64_t(g.a_rows()),
                                                uint64_t(g.a_cols()), g.lda));
  OCC_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&b_, lt_data_type(key_.operands), uint64_t(g.b_rows()),
                                                uint64_t(g.b_cols()), g.ldb));
  OCC_CUBLASLT_CHECK(
      cublasLtMatrixLayoutCreate(&d_, lt_data_type(key_.output), uint64_t(g.m), uint64_t(g.n), g.ldd));
}

void LtDescriptors::set_pointers(const void* vector, const void* aux) {
  if (has_vector(key_.epilogue)) set_attribute<const void*>(op_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, vector);
  if (has_aux(key_.epilogue)) set_attribute<const void*>(op_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
}

void LtDescriptors::release() {
  // Errors are ignored: this runs in a destructor or while an error propagates.
  if (d_) cublasLtMatrixLayoutDestroy(d_);
  if (b_) cublasLtMatrixLayoutDestroy(b_);
  if (a_) cublasLtMatrixLayoutDestroy(a_);
  if (op_) cublasLtMatmulDescDestroy(op_);
  op_ = nullptr, a_ = b_ = d_ = nullptr;
}

}  // namespace occ::kernels::cuda
