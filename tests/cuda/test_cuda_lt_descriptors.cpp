// The cuBLASLt descriptors lt_descriptors.cpp makes, read back by cuBLASLt
// itself: every attribute with the type and size <cublasLt.h> documents (the
// library refuses a buffer of another size), the epilogue each LtEpilogue names,
// and the layout of every stored matrix, for each product of a linear layer.
// The expected values are written out here, not derived from lt_problem.h.
// Needs the library but no GPU, so it runs on CPU-only machines too (SKIPPED
// where libcublasLt.so.13 cannot be loaded).
#include <cublasLt.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "core/error.h"
#include "kernels/cuda/lt_descriptors.h"

namespace occ::kernels::cuda {
namespace {

template <class T>
T get(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attr) {
  T value{};
  size_t written = 0;
  EXPECT_EQ(cublasLtMatmulDescGetAttribute(op, attr, &value, sizeof(value), &written), CUBLAS_STATUS_SUCCESS)
      << "matmul attribute " << int(attr);
  EXPECT_EQ(written, sizeof(value)) << "matmul attribute " << int(attr);
  return value;
}
template <class T>
T get(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr) {
  T value{};
  size_t written = 0;
  EXPECT_EQ(cublasLtMatrixLayoutGetAttribute(layout, attr, &value, sizeof(value), &written), CUBLAS_STATUS_SUCCESS)
      << "layout attribute " << int(attr);
  EXPECT_EQ(written, sizeof(value)) << "layout attribute " << int(attr);
  return value;
}

struct Layout {
  cudaDataType type;
  uint64_t rows, cols;
  int64_t ld;
};
void expect_layout(cublasLtMatrixLayout_t l, const Layout& want, const std::string& what) {
  EXPECT_EQ(get<uint32_t>(l, CUBLASLT_MATRIX_LAYOUT_TYPE), uint32_t(want.type)) << what;
  EXPECT_EQ(get<int32_t>(l, CUBLASLT_MATRIX_LAYOUT_ORDER), int32_t(CUBLASLT_ORDER_COL)) << what;
  EXPECT_EQ(get<uint64_t>(l, CUBLASLT_MATRIX_LAYOUT_ROWS), want.rows) << what;
  EXPECT_EQ(get<uint64_t>(l, CUBLASLT_MATRIX_LAYOUT_COLS), want.cols) << what;
  EXPECT_EQ(get<int64_t>(l, CUBLASLT_MATRIX_LAYOUT_LD), want.ld) << what;
  EXPECT_EQ(get<int32_t>(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT), 1) << what;
}

struct Case {
  std::string name;
  LtKey key;
  cublasOperation_t trans_a, trans_b;
  cublasLtEpilogue_t epilogue;
  Layout a, b, d;
  int32_t vector_type, aux_type;  // -1: not set (the aux matrix then has D's type)
};

LtKey key_of(const ColumnMajorGemm& g, Precision operands, Precision output, LtEpilogue e, Precision vector,
             Precision aux, int64_t aux_ld) {
  return make_key(g, operands, output, e, vector, aux, aux_ld, LtPointers{});
}

TEST(LtDescriptors, CublasLtReadsBackEveryAttribute) {
  try {
    cublasLtGetStatusString(CUBLAS_STATUS_SUCCESS);  // loads the library
  } catch (const Error& e) {
    GTEST_SKIP() << e.what();
  }
  constexpr Precision bf16 = Precision::Bf16, fp16 = Precision::Fp16, fp32 = Precision::Fp32;
  const Case cases[] = {
      // out[37, 29] = inp[37, 50] w[29, 50]^T + bias: out^T = (w^T)^T inp^T.
      {"forward bias", key_of(forward_gemm(37, 50, 29), bf16, bf16, LtEpilogue::Bias, fp32, fp32, 0), CUBLAS_OP_T,
       CUBLAS_OP_N, CUBLASLT_EPILOGUE_BIAS, {CUDA_R_16BF, 50, 29, 50}, {CUDA_R_16BF, 50, 37, 50},
       {CUDA_R_16BF, 29, 37, 29}, CUDA_R_32F, -1},
      {"forward gelu bias", key_of(forward_gemm(512, 768, 3072), bf16, bf16, LtEpilogue::GeluAuxBias, bf16, bf16, 3072),
       CUBLAS_OP_T, CUBLAS_OP_N, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, {CUDA_R_16BF, 768, 3072, 768},
       {CUDA_R_16BF, 768, 512, 768}, {CUDA_R_16BF, 3072, 512, 3072}, CUDA_R_16BF, -1},
      {"forward gelu fp32 out", key_of(forward_gemm(64, 768, 3072), fp16, fp32, LtEpilogue::GeluAux, fp32, fp32, 3072),
       CUBLAS_OP_T, CUBLAS_OP_N, CUBLASLT_EPILOGUE_GELU_AUX, {CUDA_R_16F, 768, 3072, 768}, {CUDA_R_16F, 768, 64, 768},
       {CUDA_R_32F, 3072, 64, 3072}, -1, -1},
      // dinp[512, 3072] = dout[512, 768] w[768, 3072]: dinp^T = w^T dout^T.
      {"backward input dgelu",
       key_of(backward_input_gemm(512, 3072, 768), bf16, bf16, LtEpilogue::DGelu, fp32, bf16, 3072), CUBLAS_OP_N,
       CUBLAS_OP_N, CUBLASLT_EPILOGUE_DGELU, {CUDA_R_16BF, 3072, 768, 3072}, {CUDA_R_16BF, 768, 512, 768},
       {CUDA_R_16BF, 3072, 512, 3072}, -1, -1},
      {"backward input dgelu bgrad fp32 dinp",
       key_of(backward_input_gemm(512, 3072, 768), bf16, fp32, LtEpilogue::DGeluBGrad, fp32, bf16, 3072), CUBLAS_OP_N,
       CUBLAS_OP_N, CUBLASLT_EPILOGUE_DGELU_BGRAD, {CUDA_R_16BF, 3072, 768, 3072}, {CUDA_R_16BF, 768, 512, 768},
       {CUDA_R_32F, 3072, 512, 3072}, CUDA_R_32F, CUDA_R_16BF},
      // The model's MLP backward: bf16 dinp and its bias gradient in D's type (bf16).
      {"backward input dgelu bgrad (the model's)",
       key_of(backward_input_gemm(512, 3072, 768), bf16, bf16, LtEpilogue::DGeluBGrad, bf16, bf16, 3072), CUBLAS_OP_N,
       CUBLAS_OP_N, CUBLASLT_EPILOGUE_DGELU_BGRAD, {CUDA_R_16BF, 3072, 768, 3072}, {CUDA_R_16BF, 768, 512, 768},
       {CUDA_R_16BF, 3072, 512, 3072}, CUDA_R_16BF, -1},
      // dw[2304, 768] += dout[512, 2304]^T inp[512, 768]: dw^T = inp^T dout.
      {"backward weight bgradb",
       key_of(backward_weight_gemm(512, 768, 2304), bf16, fp32, LtEpilogue::BGradB, fp32, fp32, 0), CUBLAS_OP_N,
       CUBLAS_OP_T, CUBLASLT_EPILOGUE_BGRADB, {CUDA_R_16BF, 768, 512, 768}, {CUDA_R_16BF, 2304, 512, 2304},
       {CUDA_R_32F, 768, 2304, 768}, CUDA_R_32F, -1},
      {"backward weight", key_of(backward_weight_gemm(37, 50, 29), fp16, fp32, LtEpilogue::None, fp32, fp32, 0),
       CUBLAS_OP_N, CUBLAS_OP_T, CUBLASLT_EPILOGUE_DEFAULT, {CUDA_R_16F, 50, 37, 50}, {CUDA_R_16F, 29, 37, 29},
       {CUDA_R_32F, 50, 29, 50}, -1, -1},
  };
  const void* vector = reinterpret_cast<const void*>(uintptr_t(0x7f0000001000));  // never dereferenced
  const void* aux = reinterpret_cast<const void*>(uintptr_t(0x7f0000002000));
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    LtDescriptors d(c.key, vector, aux);
    cublasLtMatmulDesc_t op = d.operation();
    EXPECT_EQ(get<int32_t>(op, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE), int32_t(CUBLAS_COMPUTE_32F));
    EXPECT_EQ(get<int32_t>(op, CUBLASLT_MATMUL_DESC_SCALE_TYPE), int32_t(CUDA_R_32F));
    EXPECT_EQ(get<int32_t>(op, CUBLASLT_MATMUL_DESC_POINTER_MODE), int32_t(CUBLASLT_POINTER_MODE_HOST));
    EXPECT_EQ(get<int32_t>(op, CUBLASLT_MATMUL_DESC_TRANSA), int32_t(c.trans_a));
    EXPECT_EQ(get<int32_t>(op, CUBLASLT_MATMUL_DESC_TRANSB), int32_t(c.trans_b));
    EXPECT_EQ(get<uint32_t>(op, CUBLASLT_MATMUL_DESC_EPILOGUE), uint32_t(c.epilogue));
    if (c.vector_type >= 0) {
      EXPECT_EQ(get<int32_t>(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE), c.vector_type);
      EXPECT_EQ(get<const void*>(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER), vector);
    }
    if (has_aux(c.key.epilogue)) {
      EXPECT_EQ(get<int64_t>(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD), c.key.aux_ld);
      EXPECT_EQ(get<int32_t>(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE), c.aux_type);
      EXPECT_EQ(get<const void*>(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER), aux);
    }
    // Each call's own pointers replace the first call's.
    const void* vector2 = static_cast<const char*>(vector) + 256;
    const void* aux2 = static_cast<const char*>(aux) + 512;
    d.set_pointers(vector2, aux2);
    if (c.vector_type >= 0) {
      EXPECT_EQ(get<const void*>(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER), vector2);
    }
    if (has_aux(c.key.epilogue)) {
      EXPECT_EQ(get<const void*>(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER), aux2);
    }
    expect_layout(d.a(), c.a, "A");
    expect_layout(d.b(), c.b, "B");
    expect_layout(d.d(), c.d, "D");
  }
}

}  // namespace
}  // namespace occ::kernels::cuda
