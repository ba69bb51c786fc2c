#include "comm/comm_backend.h"

#include <fmt/format.h>

#include "core/error.h"

namespace occ {

const char* comm_backend_name(CommBackend b) {
  switch (b) {
    case CommBackend::Mpi: return "mpi";
    case CommBackend::Nccl: return "nccl";
    default: return "auto";
  }
}

CommBackend parse_comm_backend(const std::string& name) {
  if (name == "auto") return CommBackend::Auto;
  if (name == "mpi") return CommBackend::Mpi;
  if (name == "nccl") return CommBackend::Nccl;
  fail("--comm-backend {} is not a backend; use auto, nccl or mpi", printable(name));
}

std::string gpu_sharing(int local_size, int gpus) {
  if (local_size > gpus) return fmt::format("{} ranks share {} GPU{}", local_size, gpus, gpus == 1 ? "" : "s");
  return fmt::format("one GPU per rank, {} on this node", local_size);
}

CommBackendChoice choose_comm_backend(CommBackend requested, Device device, int world_size, int local_size, int gpus) {
  if (device != Device::Cuda) {
    OCC_CHECK(requested != CommBackend::Nccl,
              "--comm-backend nccl moves GPU memory and needs --device cuda; use --comm-backend mpi (or auto) on the CPU");
    return {CommBackend::Mpi, "cpu"};
  }
  if (requested == CommBackend::Mpi) return {CommBackend::Mpi, "--comm-backend mpi"};
  if (requested == CommBackend::Nccl) return {CommBackend::Nccl, "--comm-backend nccl"};
  if (world_size <= 1) return {CommBackend::Mpi, "one rank: nothing to communicate"};
  if (local_size > gpus) return {CommBackend::Mpi, gpu_sharing(local_size, gpus)};
  return {CommBackend::Nccl, "one GPU per rank"};
}

}  // namespace occ
