#pragma once
// ParamTensor -> TensorDesc: how the model hands its parameters to the layers
// below it (bucketing, DP compression), which must not see model types.
#include <vector>

#include "core/tensor_desc.h"
#include "model/params.h"

namespace occ {

inline TensorDesc describe(const ParamTensor& t) {
  // A tensor of 2+ dimensions is compressed as shape[0] x (the rest).
  const int64_t rows = t.shape.empty() ? 1 : t.shape[0];
  return {t.name, t.offset, t.numel, rows, rows > 0 ? t.numel / rows : 0, t.init_key};
}

inline std::vector<TensorDesc> describe(const std::vector<ParamTensor>& tensors) {
  std::vector<TensorDesc> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) out.push_back(describe(t));
  return out;
}

}  // namespace occ
