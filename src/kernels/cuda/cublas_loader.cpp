// cuBLAS, loaded when the CUDA backend first needs it (dlopen) instead of at
// process start. Linking libcublas/libcublasLt (~0.6 GB of shared objects)
// would make every process of the program — CPU runs, each unit test, each
// rank — map them at start-up; loading on first use keeps CPU-only runs
// independent of cuBLAS being installed and gives a clear error when it is not.
//
// This file defines the few cuBLAS entry points the backend calls, with the
// declarations of <cublas_v2.h> (so the compiler checks every signature), and
// forwards each to the library's own symbol.
#include <cublas_v2.h>

#include <mutex>
#include <string>

#include "core/error.h"
#include "core/shared_library.h"

namespace {

void* cublas_library() {
  static occ::LoadedLibrary library;
  static std::once_flag once;
  std::call_once(once, [] {
    // The toolkit the binary was built with first, then the loader's search path
    // (LD_LIBRARY_PATH, e.g. a pip nvidia-cublas wheel's lib folder). Every
    // candidate's reason is kept: a later call reports the same error.
    library = occ::open_first_library({
#if defined(OCC_CUBLAS_DIR)
        std::string(OCC_CUBLAS_DIR) + "/libcublas.so.13",
#endif
        "libcublas.so.13", "libcublas.so"});
  });
  if (!library.handle)
    occ::fail("--device cuda: cannot load cuBLAS ({}); install the CUDA 13 toolkit or add its lib folder to "
              "LD_LIBRARY_PATH",
              library.why_not);
  return library.handle;
}

template <class F>
F symbol(const char* name) {
  void* p = dlsym(cublas_library(), name);
  if (!p) occ::fail("--device cuda: the loaded cuBLAS has no {}; use the CUDA 13 cuBLAS", name);
  return reinterpret_cast<F>(p);
}

}  // namespace

// Each forwarder resolves its symbol once (a function-local static).
#define OCC_CUBLAS_FORWARD(ret, name, params, args)        \
  extern "C" ret CUBLASWINAPI name params {                  \
    using Fn = ret(CUBLASWINAPI*) params;                    \
    static const Fn fn = symbol<Fn>(#name);                  \
    return fn args;                                          \
  }

OCC_CUBLAS_FORWARD(cublasStatus_t, cublasCreate_v2, (cublasHandle_t * handle), (handle))
OCC_CUBLAS_FORWARD(cublasStatus_t, cublasDestroy_v2, (cublasHandle_t handle), (handle))
OCC_CUBLAS_FORWARD(cublasStatus_t, cublasSetStream_v2, (cublasHandle_t handle, cudaStream_t stream), (handle, stream))
OCC_CUBLAS_FORWARD(cublasStatus_t, cublasSetWorkspace_v2, (cublasHandle_t handle, void* workspace, size_t bytes),
                   (handle, workspace, bytes))
OCC_CUBLAS_FORWARD(cublasStatus_t, cublasSetMathMode, (cublasHandle_t handle, cublasMath_t mode), (handle, mode))
OCC_CUBLAS_FORWARD(const char*, cublasGetStatusString, (cublasStatus_t status), (status))
OCC_CUBLAS_FORWARD(cublasStatus_t, cublasGemmEx,
                   (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                    const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B, cudaDataType Btype,
                    int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                    cublasGemmAlgo_t algo),
                   (handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc,
                    computeType, algo))
OCC_CUBLAS_FORWARD(cublasStatus_t, cublasGemmStridedBatchedEx,
                   (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                    const void* alpha, const void* A, cudaDataType Atype, int lda, long long int strideA,
                    const void* B, cudaDataType Btype, int ldb, long long int strideB, const void* beta, void* C,
                    cudaDataType Ctype, int ldc, long long int strideC, int batchCount,
                    cublasComputeType_t computeType, cublasGemmAlgo_t algo),
                   (handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB, beta, C,
                    Ctype, ldc, strideC, batchCount, computeType, algo))
