#pragma once
// A neutral description of one tensor in a flat buffer: what the layers below
// the model (gradient bucketing, DP compression) need to know about a
// parameter, without depending on the model's own ParamTensor (model/ sits
// above parallel/ and compress/).
#include <cstdint>
#include <string>

namespace occ {

struct TensorDesc {
  std::string name;        // unique within the buffer; names saved state
  int64_t offset = 0;      // into the flat buffer
  int64_t numel = 0;
  int64_t rows = 0;        // viewed as a matrix: shape[0] x (numel / shape[0])
  int64_t cols = 0;
  uint64_t key = 0;        // identifies the tensor across ranks (seeds e.g. a warm start)
};

}  // namespace occ
