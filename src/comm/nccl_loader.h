#pragma once
// NCCL, opened when a job first asks for it (comm/nccl_loader.cpp), like cuBLAS
// (kernels/cuda/cublas_loader.cpp): libnccl.so.2 is about 220 MB, and CPU runs,
// unit tests and MPI-staged GPU jobs never map it.
#include <string>

namespace occ {

// Whether libnccl.so.2 could be opened (once per process); when not, *why says why.
bool nccl_library_loaded(std::string* why);

}  // namespace occ
