#pragma once
// Makes this rank's gradients the job's after the 1F1B schedule, in one place:
// bucketed DP averaging overlapped with the last micro-batch's backward
// (DataParallelReducer), DP compression (PowerSGD or a byte method, see
// compress/dp_compressor.h) on the matrices of compressing stages
// (after its uncompressed warm-up), and the tied word-embedding
// synchronisation (baseline, or FE around the DP all-reduce). Which gradient
// takes which path is decided once, from the model's parameter layout.
// With the distributed optimizer (--use-distributed-optimizer, DP > 1) the
// buckets are reduce-scattered instead (parallel/optimizer_shards.h). Each copy
// of the tied word embedding then has a bucket of its own, so that its DP
// chunks are the same on the first and the last stage and the embedding sync
// sums only the owned chunk (the rest holds partial sums nobody reads).
// Under DiLoCo (--diloco-inner-steps) nothing is averaged over DP: each
// replica's gradients stay its own (the tied embedding still syncs inside it).
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/host_staged_communicator.h"
#include "comm/nccl_communicator.h"
#include "compress/dp_compressor.h"
#include "core/buffer.h"
#include "core/host_staging.h"
#include "core/timer.h"
#include "model/params.h"
#include "parallel/grad_sync.h"
#include "parallel/optimizer_shards.h"
#include "parallel/topology.h"
#include "parallel/wire_collectives.h"
#include "train/options.h"

namespace occ {

// The gradient groups over NCCL (null: the group runs on MPI).
struct GradientNccl {
  // DP: averages the uncompressed buckets on the device and carries DP PowerSGD's factors.
  NcclCommunicator* dp = nullptr;
  // The word embedding's sync: topo.fused_embedding with FE (--emb-comm-opt), else topo.embedding.
  NcclCommunicator* embedding = nullptr;
};

class GradientSync {
 public:
  // grads: the stage's flat gradient buffer (params' layout), which must stay
  // where it is for the object's life; timers: where the phases are recorded.
  // staged: the buffer is on a GPU (or --debug-host-staging): MPI moves
  // page-locked host copies of it (core/host_staging.h). nccl: the groups that
  // formed over NCCL (null members: MPI). ops: the gradients' backend (DP
  // compression and FE's division compute there).
  GradientSync(const TrainOptions& opt, Topology& topo, const ParamLayout& params, DeviceBuffer<float>& grads,
               bool staged, const GradientNccl& nccl, kernels::Ops& ops, PhaseTimers& timers);

  // Before the iteration's schedule; `iteration` counts the iterations done
  // (it decides whether DP PowerSGD is past its warm-up).
  void begin_iteration(int64_t iteration);
  // From the iteration's last backward: gradients at offsets >= offset are final.
  void grads_final_from(int64_t offset) { reducer_->grads_final_from(offset); }
  // After the schedule: waits for the buckets, then DP PowerSGD and the
  // embedding sync; the gradients are then the job's averages.
  void finish();

  // DP compression of this rank (null where the stage does not compress),
  // for its checkpointed state.
  DataParallelCompressor* dp_compressor() { return dp_comp_.get(); }
  // The regions the distributed optimizer shards: every bucket, and each word
  // embedding copy synchronised outside them. They tile the buffer.
  std::vector<BufferSpan> shard_regions() const;
  bool sharded() const { return sharded_; }

 private:
  struct Span {
    int64_t offset, numel;
  };
  TrainOptions opt_;
  Topology& topo_;
  HostMirror grads_;
  kernels::Ops& ops_;
  PhaseTimers& timers_;
  // The DP group for data on the gradients' device: NCCL, the staged MPI group,
  // or the MPI group itself on the CPU.
  DeviceGroup dp_device_;
  // The word embedding's sync group on the gradients' device (null: none, PP = 1 without FE).
  std::unique_ptr<DeviceGroup> emb_device_;
  std::unique_ptr<DataParallelCompressor> dp_comp_;
  std::unique_ptr<DataParallelReducer> reducer_;
  WireScratch emb_wire_;               // the embedding gradient in its wire's format
  std::vector<Span> word_embeddings_;  // either copy of the tied word embedding, in layout order
  bool compressing_ = false;           // DP compression runs this iteration
  int64_t iteration_ = 0;              // of begin_iteration (0-based)
  bool sharded_ = false;               // distributed optimizer: buckets are reduce-scattered
};

}  // namespace occ
