#pragma once
// Which ranks of a job share this rank's machine (MPI's shared-memory split):
// a multi-rank GPU job gives rank i of a node the GPU i mod (GPUs visible), so
// ranks share GPUs only when a node has fewer GPUs than ranks.
#include <mpi.h>

#include <string>
#include <vector>

namespace occ {

struct NodeRanks {
  int local_rank = 0;  // this rank's index among the ranks of its node
  int local_size = 1;  // ranks on this node
};

// Collective over `comm`.
NodeRanks node_ranks(MPI_Comm comm);

// The GPU of local rank `local_rank` when the node has `gpus` of them.
inline int gpu_of_local_rank(int local_rank, int gpus) { return gpus > 0 ? local_rank % gpus : 0; }

// How many different GPUs the ids name (core/device.h cuda_device_pci_id;
// empty ids, ranks without a GPU, count none).
int distinct_gpus(const std::vector<std::string>& ids);
// Collective over `comm`: how many different GPUs the ranks of this rank's
// node compute on, from each rank's `gpu_id`. Counting the GPUs a rank sees
// would be wrong where each rank sees only its own (a per-rank
// CUDA_VISIBLE_DEVICES, as Slurm's GPU binding sets).
int gpus_in_use_on_node(MPI_Comm comm, const std::string& gpu_id);

}  // namespace occ
