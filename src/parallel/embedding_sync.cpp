#include "parallel/embedding_sync.h"

namespace occ {

void sync_tied_embedding(Communicator* embedding, kernels::Ops& ops, float* grad, size_t count, Precision wire,
                         WireScratch& scratch) {
  if (embedding) wire_allreduce_sum(*embedding, ops, grad, int64_t(count), wire, Traffic::Embedding, scratch);
}

void fused_embedding_sync(Communicator& fused, int dp_size, kernels::Ops& ops, float* grad, size_t count,
                          Precision wire, WireScratch& scratch) {
  wire_allreduce_sum(fused, ops, grad, int64_t(count), wire, Traffic::Embedding, scratch);
  ops.scale(grad, 1.0f / float(dp_size), int64_t(count));
}

}  // namespace occ
