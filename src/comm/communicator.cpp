#include "comm/communicator.h"

#include <cstring>

namespace occ {

const char* traffic_name(Traffic t) {
  switch (t) {
    case Traffic::PipelineForward: return "pp_fwd";
    case Traffic::PipelineBackward: return "pp_bwd";
    case Traffic::TensorParallel: return "tp";
    case Traffic::DataParallel: return "dp";
    case Traffic::Embedding: return "emb";
    default: return "other";
  }
}

void SelfCommunicator::allgather(const float* in, float* out, size_t count, Traffic) {
  if (in != out) std::memcpy(out, in, count * sizeof(float));
}

void SelfCommunicator::reduce_scatter(const float* in, float* out, size_t count, Traffic) {
  if (in != out) std::memcpy(out, in, count * sizeof(float));
}

}  // namespace occ
