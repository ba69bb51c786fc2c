// cuBLASLt, loaded when the CUDA backend first needs it (dlopen), for the same
// reasons as cuBLAS (cublas_loader.cpp): linking it would make every process of
// the program, CPU-only runs and unit tests included, map it at start-up, and a
// missing library should be a clear error on first use, not a loader failure.
//
// This file defines the cuBLASLt entry points the backend calls (lt_descriptors.cpp,
// lt_matmul.cpp; the Get*Attribute pair for the tests that read descriptors back),
// with the declarations of <cublasLt.h>, so that the compiler checks every
// signature, and forwards each to the library's own symbol.
#include <cublasLt.h>

#include <mutex>
#include <string>

#include "core/error.h"
#include "core/shared_library.h"

namespace {

void* cublaslt_library() {
  static occ::LoadedLibrary library;
  static std::once_flag once;
  std::call_once(once, [] {
    // The toolkit the binary was built with first, then the loader's search path
    // (LD_LIBRARY_PATH, e.g. a pip nvidia-cublas wheel's lib folder). Every
    // candidate's reason is kept: a later call reports the same error.
    library = occ::open_first_library({
#if defined(OCC_CUBLAS_DIR)
        std::string(OCC_CUBLAS_DIR) + "/libcublasLt.so.13",
#endif
        "libcublasLt.so.13", "libcublasLt.so"});
  });
  if (!library.handle)
    occ::fail("--device cuda: cannot load cuBLASLt ({}); install the CUDA 13 toolkit or add its lib folder to "
              "LD_LIBRARY_PATH",
              library.why_not);
  return library.handle;
}

template <class F>
F symbol(const char* name) {
  void* p = dlsym(cublaslt_library(), name);
  if (!p) occ::fail("--device cuda: the loaded cuBLASLt has no {}; use the CUDA 13 cuBLASLt", name);
  return reinterpret_cast<F>(p);
}

}  // namespace

// Each forwarder resolves its symbol once (a function-local static).
#define OCC_CUBLASLT_FORWARD(ret, name, params, args) \
  extern "C" ret CUBLASWINAPI name params {             \
    using Fn = ret(CUBLASWINAPI*) params;               \
    static const Fn fn = symbol<Fn>(#name);             \
    return fn args;                                     \
  }

OCC_CUBLASLT_FORWARD(cublasStatus_t, cublasLtCreate, (cublasLtHandle_t * lightHandle), (lightHandle))
OCC_CUBLASLT_FORWARD(cublasStatus_t, cublasLtDestroy, (cublasLtHandle_t lightHandle), (lightHandle))
OCC_CUBLASLT_FORWARD(const char*, cublasLtGetStatusString, (cublasStatus_t status), (status))
OCC_CUBLASLT_FORWARD(cublasStatus_t, cublasLtMatmulDescCreate,
                     (cublasLtMatmulDesc_t * matmulDesc, cublasComputeType_t computeType, cudaDataType_t scaleType),
                     (matmulDesc, computeType, scaleType))
OCC_CUBLASLT_FORWARD(cublasStatus_t, cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t matmulDesc), (matmulDesc))
OCC_CUBLASLT_FORWARD(cublasStatus_t, cublasLtMatmulDescSetAttribute,
                     (cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr, const void* buf,
                      size_t sizeInBytes),
                     (matmulDesc, attr, buf, sizeInBytes))
OCC_CUBLASLT_FORWARD(cublasStatus_t, cublasLtMatmulDescGetAttribute,
                     (cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr, void* buf,
                      size_t sizeInBytes, size_t* sizeWritten),
                     (matmulDesc, attr, buf, sizeInBytes, sizeWritten))
OCC_CUBLASLT_FORWARD(cublasStatus_t, cublasLtMatrixLayoutCreate,
                     (cublasLtMatrixLayout_t * matLayout, cudaDataType type, uint64_t rows, uint64_t cols,
                      int64_t ld),
                     (matLayout, type, rows, cols, ld))
OCC_CUBLASLT_FORWARD(cublasStatus_t, cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t matLayout), (matLayout))
OCC_CUBLASLT_FORWARD(cublasStatus_t, cublasLtMatrixLayoutGetAttribute,
                     (cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr, void* buf,
                      size_t sizeInBytes, size_t* sizeWritten),
                     (matLayout, attr, buf, sizeInBytes, sizeWritten))
OCC_CUBLASLT_FORWARD(cublasStatus_t, cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * pref), (pref))
OCC_CUBLASLT_FORWARD(cublasStatus_t, cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t pref), (pref))
OCC_CUBLASLT_FORWARD(cublasStatus_t, cublasLtMatmulPreferenceSetAttribute,
                     (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                      size_t sizeInBytes),
                     (pref, attr, buf, sizeInBytes))
OCC_CUBLASLT_FORWARD(cublasStatus_t, cublasLtMatmulAlgoGetHeuristic,
                     (cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc,
                      cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                      cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                      cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int* returnAlgoCount),
                     (lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, preference, requestedAlgoCount,
                      heuristicResultsArray, returnAlgoCount))
OCC_CUBLASLT_FORWARD(cublasStatus_t, cublasLtMatmul,
                     (cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void* alpha,
                      const void* A, cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                      const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                      cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                      size_t workspaceSizeInBytes, cudaStream_t stream),
                     (lightHandle, computeDesc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace,
                      workspaceSizeInBytes, stream))
