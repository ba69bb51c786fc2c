// Host half of the CUDA backend's error reporting. Built by the C++ compiler
// (core/error.h includes {fmt}, whose headers nvcc cannot compile), so the .cu
// files throw the project's occ::Error through these two functions.
#include <initializer_list>
#include <string>

#include "core/error.h"
#include "kernels/cuda/cuda_backend.h"

namespace occ::kernels::cuda {

void throw_cuda_error(const char* call, const char* detail, const char* file, int line) {
  // Keep only the file name: the message is one line for the user.
  std::string where = file;
  if (const auto slash = where.find_last_of('/'); slash != std::string::npos) where = where.substr(slash + 1);
  fail("CUDA error: {} ({}:{}: {})", detail, where, line, call);
}

void throw_error(const std::string& message) { throw Error(message); }

}  // namespace occ::kernels::cuda

namespace occ::kernels::cuda {

void require_format(Precision format, std::initializer_list<ConstTensorRef> tensors, const char* op) {
  for (const ConstTensorRef& t : tensors)
    if (t && t.format() != format)
      fail("internal: CUDA {}: a {} tensor among {} ones (one call takes one storage format)", op,
           precision_name(t.format()), precision_name(format));
}

}  // namespace occ::kernels::cuda
