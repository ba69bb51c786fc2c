#include "comm/communicator.h"

#include <cstring>

#include "core/error.h"

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

void check_same_format(ConstTensorRef a, ConstTensorRef b, const char* op) {
  OCC_CHECK(a.format() == b.format(), "internal: {} of {} values into {} ones", op, precision_name(a.format()),
            precision_name(b.format()));
}

void SelfCommunicator::allgather(ConstTensorRef in, TensorRef out, size_t count, Traffic) {
  check_same_format(in, out, "all-gather");
  if (in.data() != out.data()) std::memcpy(out.data(), in.data(), count * element_bytes(in.format()));
}

void SelfCommunicator::reduce_scatter(ConstTensorRef in, TensorRef out, size_t count, Traffic) {
  check_same_format(in, out, "reduce-scatter");
  if (in.data() != out.data()) std::memcpy(out.data(), in.data(), count * element_bytes(in.format()));
}

}  // namespace occ
