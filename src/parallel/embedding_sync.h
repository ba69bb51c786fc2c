#pragma once
// Word-embedding gradient synchronisation: collectives over the topology's
// embedding groups, baseline and Optimus-CC's fused embedding sync (FE).
// They live in parallel/ (not compress/): FE changes which group carries the
// gradient, it does not compress anything.
//   Baseline: the embedding gradient is averaged in the DP all-reduce (on the
//     first and on the last stage), then summed over {first, last} stage.
//   FE: it is left out of the DP all-reduce and summed ONCE over
//     {first, last stage} x DP of the same TP rank, then divided by DP: the
//     same result (up to float reassociation), one large collective fewer.
#include <cstddef>

#include "parallel/topology.h"

namespace occ {

// Baseline, after the DP all-reduce: sum the two tied copies (no-op with PP = 1).
void sync_tied_embedding(Topology& topo, float* grad, size_t count);
// FE, instead of DP all-reduce + sync_tied_embedding.
void fused_embedding_sync(Topology& topo, float* grad, size_t count);

}  // namespace occ
