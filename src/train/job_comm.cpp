#include "train/job_comm.h"

#include <cstdio>
#include <utility>

#include <fmt/format.h>

#include "comm/comm_backend.h"
#include "core/buffer.h"
#include "core/cuda_module_loading.h"
#include "core/device.h"

namespace occ {

JobComm::JobComm(const TrainOptions& opt, Topology& topo, int world_size, double comm_timeout_s) {
  select_device(opt, world_size);
  select_backend(opt, topo, world_size, comm_timeout_s);
  // The pipeline's links over MPI where NCCL does not carry them (every rank
  // agrees: select_backend's choice is the job's).
  if (!pipeline_.on_device)
    pipeline_ = PipelineLinks::create(*topo.pp, opt.model_chunks() > 1, false, comm_timeout_s, nullptr);
  tp_device_ = std::make_unique<DeviceGroup>(*topo.tp, tp_nccl_.get(), staged_, opt.device);
}

void JobComm::select_device(const TrainOptions& opt, int world_size) {
  staged_ = opt.host_staged(world_size);
  if (opt.device != Device::Cuda) return;
  node_ = node_ranks(MPI_COMM_WORLD);
  use_cuda_device(gpu_of_local_rank(node_.local_rank, cuda_device_count()));
}

void JobComm::select_backend(const TrainOptions& opt, Topology& topo, int world_size, double comm_timeout_s) {
  if (opt.device != Device::Cuda) {
    if (staged_) line_ = "comm: mpi (host-staged on the CPU: --debug-host-staging)";
    return;
  }
  if (world_size == 1) return;
  // Collective: the physical GPUs this node's ranks use (select_device chose each one's).
  const int gpus = gpus_in_use_on_node(MPI_COMM_WORLD, cuda_device_pci_id());
  const std::string sharing = gpu_sharing(node_.local_size, gpus);
  const CommBackendChoice choice =
      choose_comm_backend(parse_comm_backend(opt.comm_backend_name), opt.device, world_size, node_.local_size, gpus);
  // Nodes may differ (ranks per node, GPUs): NCCL only if every rank chose it,
  // before any rank enters the collective set-up below.
  int all_nccl = choice.backend == CommBackend::Nccl;
  MPI_Allreduce(MPI_IN_PLACE, &all_nccl, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all_nccl) {
    line_ = choice.backend == CommBackend::Nccl
                ? fmt::format("comm: mpi (host-staged: {}; another node's ranks share GPUs)", sharing)
                : fmt::format("comm: mpi (host-staged: {})", sharing);
    return;
  }
  std::string why;
  if (topo.tp->size() > 1) tp_nccl_ = NcclCommunicator::create(*topo.tp, comm_timeout_s, &why);
  const bool tp_ok = topo.tp->size() == 1 || tp_nccl_;
  std::string dp_why;
  if (topo.dp_async->size() > 1) dp_nccl_ = NcclCommunicator::create(*topo.dp_async, comm_timeout_s, &dp_why);
  const bool dp_ok = topo.dp_async->size() == 1 || dp_nccl_;
  if (why.empty()) why = dp_why;
  // The word embedding's sync group, where this rank is in one (first and last stages).
  MpiCommunicator* emb = opt.emb_comm_opt ? topo.fused_embedding.get() : topo.embedding.get();
  std::string emb_why;
  if (emb && emb->size() > 1) emb_nccl_ = NcclCommunicator::create(*emb, comm_timeout_s, &emb_why);
  const bool emb_ok = !emb || emb->size() == 1 || emb_nccl_;
  if (why.empty()) why = emb_why;
  // The pipeline's links to this rank's neighbours (parallel/pipeline_links.h).
  const bool ring = opt.model_chunks() > 1;
  std::string pp_why;
  if (topo.pp->size() > 1) pipeline_ = PipelineLinks::create(*topo.pp, ring, true, comm_timeout_s, &pp_why);
  const bool pp_ok = pipeline_.complete(topo.pp->rank(), topo.pp->size(), ring);
  if (why.empty()) why = pp_why;
  // One backend for the whole job: the lowest failing rank's reason for all.
  int failing = tp_ok && dp_ok && emb_ok && pp_ok ? world_size : topo.world->rank();
  MPI_Allreduce(MPI_IN_PLACE, &failing, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (failing < world_size) {
    char reason[512] = {};
    std::snprintf(reason, sizeof(reason), "%s", why.c_str());
    MPI_Bcast(reason, sizeof(reason), MPI_CHAR, failing, MPI_COMM_WORLD);
    tp_nccl_.reset();
    dp_nccl_.reset();
    emb_nccl_.reset();
    pipeline_ = {};
    line_ = fmt::format("comm: nccl unavailable ({}); falling back to mpi (host-staged: {})", reason, sharing);
    return;
  }
  // NCCL connects a group's peers on its first collective. Do it here, one
  // group after the other on every rank, rather than first in the iteration,
  // where the TP group (main thread) and the DP group (reducer thread) would
  // connect concurrently, in an order that may differ between ranks.
  DeviceBuffer<float> warm_up(Device::Cuda, 1);
  for (NcclCommunicator* group : {tp_nccl_.get(), dp_nccl_.get(), emb_nccl_.get()})
    if (group) group->allreduce_sum(warm_up.data(), 1, Traffic::Other);
  // What runs on NCCL anywhere in the job (a rank's own groups depend on its stage).
  int on_nccl[4] = {tp_nccl_ != nullptr, dp_nccl_ != nullptr, emb_nccl_ != nullptr, topo.pp->size() > 1};
  MPI_Allreduce(MPI_IN_PLACE, on_nccl, 4, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  std::string groups;
  for (auto [on, name] : {std::pair{on_nccl[0], "tp"}, {on_nccl[1], "dp buckets"},
                          {on_nccl[2], opt.emb_comm_opt ? "fused embedding sync" : "embedding sync"},
                          {on_nccl[3], "pipeline"}})
    if (on) groups += groups.empty() ? name : fmt::format(", {}", name);
  line_ = fmt::format("comm: nccl (NCCL {}, {}: {})", nccl_version(nullptr), choice.why, groups);
  modules_line_ = cuda_module_loading_line();
}

}  // namespace occ
