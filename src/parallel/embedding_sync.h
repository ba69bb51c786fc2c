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

#include "comm/communicator.h"
#include "kernels/ops.h"
#include "parallel/wire_collectives.h"

namespace occ {

// Both take the gradient on the device of `ops` and a group for data there
// (comm/host_staged_communicator.h DeviceGroup: NCCL, staged MPI or MPI), and
// sum it on the gradients' wire (core/wire_format.h: fp32, as Megatron's
// embedding sync reduces its main_grad, or bf16 with --grad-reduce-in-bf16).
// Baseline, after the DP all-reduce: sum the two tied copies over the
// embedding group (null with PP = 1: nothing to do).
void sync_tied_embedding(Communicator* embedding, kernels::Ops& ops, float* grad, size_t count, Precision wire,
                         WireScratch& scratch);
// FE, instead of DP all-reduce + sync_tied_embedding: sum over the fused group,
// then divide by the DP size.
void fused_embedding_sync(Communicator& fused, int dp_size, kernels::Ops& ops, float* grad, size_t count,
                          Precision wire, WireScratch& scratch);

}  // namespace occ
