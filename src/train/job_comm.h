#pragma once
// How one rank of a training job communicates on its device, decided once at
// start-up (collective over MPI_COMM_WORLD): which GPU it computes on, whether
// its transfers are staged through host memory, which groups run over NCCL
// (comm/comm_backend.h: --comm-backend), and the "comm: ..." line saying so.
//
// With NCCL the model's TP collectives, the DP buckets, DP compression's
// factors or messages, the word embedding's sync (tied or FE) and the
// pipeline's transfers (parallel/pipeline_links.h) run on device memory, each
// group on a stream of its own. Where an NCCL group cannot form on some rank,
// every rank falls back to MPI (host-staged), and the job says why.
#include <memory>
#include <string>

#include "comm/host_staged_communicator.h"
#include "comm/nccl_communicator.h"
#include "comm/node_ranks.h"
#include "parallel/pipeline_links.h"
#include "parallel/topology.h"
#include "train/gradient_sync.h"
#include "train/options.h"

namespace occ {

class JobComm {
 public:
  // Collective. Selects this rank's GPU (a GPU job gives each rank of a node
  // its own GPU while there are enough, rank i: GPU i mod GPUs, else the ranks
  // share them) before anything is allocated on it, then forms the NCCL groups.
  JobComm(const TrainOptions& opt, Topology& topo, int world_size, double comm_timeout_s);
  JobComm(const JobComm&) = delete;
  JobComm& operator=(const JobComm&) = delete;

  // Transfers go through page-locked host copies (a multi-rank GPU job on MPI,
  // or the CPU with --debug-host-staging).
  bool staged() const { return staged_; }
  // The model's TP group for data on its device (NCCL, staged MPI or MPI).
  Communicator& tp() { return tp_device_->comm(); }
  // The gradient groups that run over NCCL (null members: MPI).
  GradientNccl gradient_nccl() const { return {dp_nccl_.get(), emb_nccl_.get()}; }
  // This rank's links to its pipeline neighbours (NCCL or MPI).
  PipelineLinks& pipeline_links() { return pipeline_; }
  // "comm: ..." for the job's start (empty: a plain CPU job, nothing to say).
  const std::string& line() const { return line_; }
  // With NCCL: how CUDA loads kernels (core/cuda_module_loading.h), "" otherwise.
  const std::string& modules_line() const { return modules_line_; }

 private:
  void select_device(const TrainOptions& opt, int world_size);
  void select_backend(const TrainOptions& opt, Topology& topo, int world_size, double comm_timeout_s);

  bool staged_ = false;
  NodeRanks node_;  // this rank's place on its node (GPU jobs)
  // Declared before tp_device_, which points into tp_nccl_.
  std::unique_ptr<NcclCommunicator> tp_nccl_, dp_nccl_, emb_nccl_;
  PipelineLinks pipeline_;
  std::unique_ptr<DeviceGroup> tp_device_;
  std::string line_, modules_line_;
};

}  // namespace occ
