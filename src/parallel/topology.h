#pragma once
// The process groups of a TP x PP x DP job (Megatron's rank layout):
//   tp        consecutive ranks (one node)                  tensor-parallel collectives
//   dp        same (pp, tp)                                 gradient all-reduce
//   dp_async  a second handle on the dp group               the bucketed reducer thread
//   pp        same (dp, tp), ordered by stage               activations / activation gradients
//   embedding {first stage, last stage} of one (dp, tp)     tied word-embedding gradients
//   fused_embedding  {first, last stage} x DP, same tp       Optimus-CC's fused embedding sync (FE)
//   model     same dp rank (all of TP x PP)                 global grad norm
//   world     everything                                    loss reporting, barriers, metrics
#include <memory>

#include "comm/mpi_communicator.h"
#include "core/layout.h"

namespace occ {

struct Topology {
  ParallelLayout layout;
  TrafficCounters counters;
  std::unique_ptr<MpiCommunicator> world, tp, dp, dp_async, pp, embedding, fused_embedding, model;

  // Collective over MPI_COMM_WORLD: every rank must call it with the same sizes.
  static std::unique_ptr<Topology> create(int tp_size, int pp_size, double timeout_s);
  int world_rank() const { return world->rank(); }
};

}  // namespace occ
