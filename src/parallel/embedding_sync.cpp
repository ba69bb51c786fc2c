#include "parallel/embedding_sync.h"

namespace occ {

void sync_tied_embedding(Topology& topo, float* grad, size_t count) {
  if (topo.embedding) topo.embedding->allreduce_sum(grad, count, Traffic::Embedding);
}

void fused_embedding_sync(Topology& topo, float* grad, size_t count) {
  topo.fused_embedding->allreduce_sum(grad, count, Traffic::Embedding);
  const float inv = 1.0f / float(topo.layout.dp_size);
  for (size_t i = 0; i < count; ++i) grad[i] *= inv;
}

}  // namespace occ
