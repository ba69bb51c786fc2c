#pragma once
// Which library moves a GPU job's collectives: NCCL (one GPU per rank, device
// memory straight onto the wire) or MPI from page-locked host copies (what
// works when ranks share a GPU: NCCL refuses two ranks of one communicator on
// one GPU). --comm-backend auto picks from the node's ranks and GPUs;
// nccl / mpi insist, and an NCCL group that cannot form falls back to MPI
// with the reason printed.
#include <string>

#include "core/device.h"

namespace occ {

enum class CommBackend { Auto, Mpi, Nccl };

const char* comm_backend_name(CommBackend b);  // "auto" | "mpi" | "nccl"
// Throws occ::Error naming the choices for anything else.
CommBackend parse_comm_backend(const std::string& name);

struct CommBackendChoice {
  CommBackend backend = CommBackend::Mpi;  // Mpi or Nccl, never Auto
  std::string why;                         // one clause, for the job's `comm:` line
};

// How this node's `local_size` ranks sit on its `gpus` GPUs, for the `comm:`
// lines: "4 ranks share 1 GPU", or "one GPU per rank, 2 on this node".
std::string gpu_sharing(int local_size, int gpus);

// Pure: the backend for a job of `world_size` ranks on `device`, where this
// node runs `local_size` ranks over `gpus` different GPUs (node_ranks.h:
// gpus_in_use_on_node). Throws occ::Error for a request that cannot mean
// anything (nccl on the CPU).
CommBackendChoice choose_comm_backend(CommBackend requested, Device device, int world_size, int local_size, int gpus);

}  // namespace occ
