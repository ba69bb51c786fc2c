#include "train/gradient_sync.h"

#include <cmath>
#include <string>
#include <unordered_map>

#include "model/tensor_descs.h"
#include "parallel/embedding_sync.h"

namespace occ {

GradientSync::GradientSync(const TrainOptions& opt, Topology& topo, const ParamLayout& params,
                           DeviceBuffer<float>& grads, bool staged, const GradientNccl& nccl, kernels::Ops& ops,
                           PhaseTimers& timers)
    : opt_(opt),
      topo_(topo),
      // A page-locked copy of every gradient only where the DP reducer needs
      // one: buckets reduced by MPI through host memory.
      grads_(grads.device(), grads.data(), grads.size(), staged && !nccl.dp && topo.dp_async->size() > 1),
      ops_(ops),
      timers_(timers),
      // NCCL's DP group is idle while finish() runs: the reducer thread is done with it.
      dp_device_(*topo_.dp, nccl.dp, staged, grads.device()),
      emb_wire_(grads.device()) {
  if (MpiCommunicator* emb = opt_.emb_comm_opt ? topo_.fused_embedding.get() : topo_.embedding.get())
    emb_device_ = std::make_unique<DeviceGroup>(*emb, nccl.embedding, staged, grads.device());
  const ParallelLayout& layout = topo.layout;
  // Which gradients take which path: FE's word embedding goes around the DP
  // all-reduce; DP PowerSGD takes the matrices of compressing stages.
  // (With DP = 1 there is no DP traffic to compress.)
  const bool compress_stage = opt_.grad_comp.stage_compresses(layout.pp_rank) && layout.dp_size > 1;
  sharded_ = opt_.use_distributed_optimizer && layout.dp_size > 1;
  auto fused = [&](const ParamTensor& t) { return opt_.emb_comm_opt && t.word_embedding; };
  auto own_bucket = [&](const ParamTensor& t) { return sharded_ && t.word_embedding && !fused(t); };
  auto compressible = [&](const ParamTensor& t) { return compress_stage && t.shape.size() >= 2 && !fused(t); };
  std::vector<TensorDesc> to_compress;
  std::unordered_map<std::string, int> group;  // by name: make_buckets sees TensorDescs, not the model's tensors
  for (const auto& t : params.tensors()) {
    if (compressible(t)) to_compress.push_back(describe(t));
    if (t.word_embedding) word_embeddings_.push_back({t.offset, t.numel});
    // DiLoCo's replicas take their inner steps alone: no tensor is averaged over DP (train/diloco.h).
    group[t.name] = fused(t) || opt_.diloco.enabled() ? -1 : (compressible(t) ? 1 : 0) | (own_bucket(t) ? 2 : 0);
  }
  if (compress_stage) dp_comp_ = make_dp_compressor(opt_.grad_comp, to_compress, opt_.seed, ops);
  reducer_ = std::make_unique<DataParallelReducer>(
      *topo_.dp_async,
      make_buckets(describe(params.tensors()), opt_.dp_bucket_elems,
                   [&](const TensorDesc& t) { return group.at(t.name); }),
      grads_, sharded_, nccl.dp, opt_.wire_formats().gradients, &ops_);
}

void GradientSync::begin_iteration(int64_t iteration) {
  iteration_ = iteration;
  compressing_ =
      dp_comp_ && double(iteration) >= double(opt_.grad_comp.warmup_fraction) * double(opt_.train_iters);
  reducer_->begin_iteration(compressing_);
}

void GradientSync::finish() {
  const double t0 = now_seconds();
  timers_.add("dp_allreduce", reducer_->finish());
  timers_.add("dp_busy", reducer_->busy_seconds());
  timers_.add_event("dp_allreduce wait", t0, now_seconds());
  for (auto& e : reducer_->take_events()) timers_.add_event(e.name, e.start, e.end, 1);
  // Staged, the reducer has already written its buckets back; the rest runs on the device.
  if (compressing_) {
    if (opt_.debug_inject_nan_dp == iteration_ + 1 && topo_.layout.dp_rank == 0 && topo_.layout.tp_rank == 0 &&
        !dp_comp_->tensors().empty()) {
      // Test only: a NaN in the first compressed gradient, before its DP compressor encodes it.
      ops_.fill(grads_.device_data() + dp_comp_->tensors()[0].offset, std::nanf(""), 1);
    }
    dp_comp_->begin_iteration(iteration_);
    dp_comp_->reduce(grads_.device_data(), {*topo_.dp, dp_device_.comm(), opt_.wire_formats().gradients}, timers_);
  }
  for (const Span& w : word_embeddings_) {
    ScopedPhase scope(timers_, "emb_allreduce");
    size_t lo = size_t(w.offset), n = size_t(w.numel);
    if (!opt_.emb_comm_opt && sharded_) {
      // Sharded, the optimizer reads only this rank's owned chunk of the copy's
      // own bucket, the same chunk on both stages: sum only that. (Reduce-
      // scattered, the rest holds partial sums. Where DP PowerSGD averaged the
      // copy, all of it is averaged, but with SC the other stage may not
      // compress: both stages must send the same count.)
      const MpiCommunicator::Chunk own = topo_.dp->owned_chunk(n);
      lo += own.lo;
      n = own.len;
    }
    float* g = grads_.device_data() + lo;
    const Precision wire = opt_.wire_formats().gradients;
    if (opt_.emb_comm_opt)
      fused_embedding_sync(emb_device_->comm(), topo_.layout.dp_size, ops_, g, n, wire, emb_wire_);
    else
      sync_tied_embedding(emb_device_ ? &emb_device_->comm() : nullptr, ops_, g, n, wire, emb_wire_);
  }
}

std::vector<BufferSpan> GradientSync::shard_regions() const {
  std::vector<BufferSpan> regions;
  for (const GradBucket& b : reducer_->buckets()) regions.push_back({b.begin, b.end - b.begin});
  for (const Span& w : word_embeddings_)
    if (opt_.emb_comm_opt) regions.push_back({w.offset, w.numel});  // FE: synchronised outside the buckets
  return regions;
}

}  // namespace occ
