#include "parallel/embedding_sync.h"

namespace occ {

void sync_tied_embedding(Communicator* embedding, float* grad, size_t count) {
  if (embedding) embedding->allreduce_sum(grad, count, Traffic::Embedding);
}

void fused_embedding_sync(Communicator& fused, int dp_size, kernels::Ops& ops, float* grad, size_t count) {
  fused.allreduce_sum(grad, count, Traffic::Embedding);
  ops.scale(grad, 1.0f / float(dp_size), int64_t(count));
}

}  // namespace occ
