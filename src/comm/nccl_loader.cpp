// The NCCL entry points NcclCommunicator calls, declared by <nccl.h> (so the
// compiler checks every signature) and forwarded to the library's own symbols,
// opened with dlopen on first use (comm/nccl_loader.h). Built with the CUDA backend only.
#include "comm/nccl_loader.h"

#if defined(OCC_WITH_CUDA)
#include <dlfcn.h>
#include <nccl.h>

#include <mutex>

#include "core/error.h"

namespace {

void* g_handle = nullptr;
std::string g_error;

void* nccl_library() {
  static std::once_flag once;
  std::call_once(once, [] {
    // The toolkit the binary was built with first, then the loader's search path
    // (LD_LIBRARY_PATH, e.g. a pip nvidia-nccl wheel's lib folder).
    const std::string candidates[] = {
#if defined(OCC_NCCL_DIR)
        std::string(OCC_NCCL_DIR) + "/libnccl.so.2",
#endif
        "libnccl.so.2", "libnccl.so"};
    for (const std::string& name : candidates) {
      if ((g_handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) != nullptr) return;
      const char* e = dlerror();
      if (g_error.empty() && e) g_error = e;
    }
  });
  return g_handle;
}

template <class F>
F symbol(const char* name) {
  void* lib = nccl_library();
  if (!lib) occ::fail("NCCL is not loaded ({}); install NCCL 2 or use --comm-backend mpi", g_error);
  void* p = dlsym(lib, name);
  if (!p) occ::fail("the loaded NCCL has no {}; use NCCL 2.19 or newer, or --comm-backend mpi", name);
  return reinterpret_cast<F>(p);
}

}  // namespace

namespace occ {

// Every entry point the forwarders below resolve: checked when the library is
// opened, so an NCCL too old for them is a reason to fall back, not a throw mid-job.
const char* const kEntryPoints[] = {"ncclGetVersion", "ncclGetUniqueId", "ncclCommInitRankConfig",
                                    "ncclCommGetAsyncError", "ncclCommAbort", "ncclCommFinalize",
                                    "ncclCommDestroy", "ncclGetErrorString", "ncclGetLastError",
                                    "ncclGroupStart", "ncclGroupEnd", "ncclAllReduce",
                                    "ncclAllGather", "ncclReduce", "ncclSend", "ncclRecv"};

bool nccl_library_loaded(std::string* why) {
  void* lib = nccl_library();
  if (!lib) {
    if (why) *why = "cannot load libnccl.so.2 (" + (g_error.empty() ? std::string("not found") : g_error) +
                    "); install NCCL 2 or add its lib folder to LD_LIBRARY_PATH";
    return false;
  }
  for (const char* name : kEntryPoints)
    if (!dlsym(lib, name)) {
      if (why) *why = std::string("the loaded libnccl.so.2 has no ") + name + "; install NCCL 2.19 or newer";
      return false;
    }
  return true;
}

}  // namespace occ

// Each forwarder resolves its symbol once (a function-local static).
#define OCC_NCCL_FORWARD(ret, name, params, args) \
  extern "C" ret name params {                    \
    using Fn = ret(*) params;                     \
    static const Fn fn = symbol<Fn>(#name);       \
    return fn args;                               \
  }

OCC_NCCL_FORWARD(ncclResult_t, ncclGetVersion, (int* version), (version))
OCC_NCCL_FORWARD(ncclResult_t, ncclGetUniqueId, (ncclUniqueId * id), (id))
OCC_NCCL_FORWARD(ncclResult_t, ncclCommInitRankConfig,
                 (ncclComm_t * comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config),
                 (comm, nranks, id, rank, config))
OCC_NCCL_FORWARD(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t* error), (comm, error))
OCC_NCCL_FORWARD(ncclResult_t, ncclCommAbort, (ncclComm_t comm), (comm))
OCC_NCCL_FORWARD(ncclResult_t, ncclCommFinalize, (ncclComm_t comm), (comm))
OCC_NCCL_FORWARD(ncclResult_t, ncclCommDestroy, (ncclComm_t comm), (comm))
OCC_NCCL_FORWARD(const char*, ncclGetErrorString, (ncclResult_t result), (result))
OCC_NCCL_FORWARD(const char*, ncclGetLastError, (ncclComm_t comm), (comm))
OCC_NCCL_FORWARD(ncclResult_t, ncclGroupStart, (), ())
OCC_NCCL_FORWARD(ncclResult_t, ncclGroupEnd, (), ())
OCC_NCCL_FORWARD(ncclResult_t, ncclAllReduce,
                 (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                  ncclComm_t comm, cudaStream_t stream),
                 (sendbuff, recvbuff, count, datatype, op, comm, stream))
OCC_NCCL_FORWARD(ncclResult_t, ncclAllGather,
                 (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
                  cudaStream_t stream),
                 (sendbuff, recvbuff, sendcount, datatype, comm, stream))
OCC_NCCL_FORWARD(ncclResult_t, ncclReduce,
                 (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                  int root, ncclComm_t comm, cudaStream_t stream),
                 (sendbuff, recvbuff, count, datatype, op, root, comm, stream))
OCC_NCCL_FORWARD(ncclResult_t, ncclSend,
                 (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                  cudaStream_t stream),
                 (sendbuff, count, datatype, peer, comm, stream))
OCC_NCCL_FORWARD(ncclResult_t, ncclRecv,
                 (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                  cudaStream_t stream),
                 (recvbuff, count, datatype, peer, comm, stream))

#else  // no CUDA backend

namespace occ {

bool nccl_library_loaded(std::string* why) {
  if (why) *why = "this build has no CUDA backend (rebuild where nvcc is found: /usr/local/cuda/bin/nvcc)";
  return false;
}

}  // namespace occ

#endif
