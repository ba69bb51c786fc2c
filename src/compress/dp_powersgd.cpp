#include "compress/dp_powersgd.h"

#include <algorithm>

#include "compress/powersgd.h"

namespace occ {

DataParallelPowerSgd::DataParallelPowerSgd(const GradCompressionConfig& cfg, std::vector<TensorDesc> tensors,
                                           uint64_t seed, kernels::Ops& ops)
    : cfg_(cfg), tensors_(std::move(tensors)), ops_(ops) {
  const Device d = ops_.device();
  int64_t largest = 0;
  for (const auto& t : tensors_) {
    const int64_t n = t.rows, m = t.cols, k = powersgd::effective_rank(n, m, cfg.rank);
    slots_.push_back({t.offset, n, m, k, p_total_, q_total_});
    p_total_ += n * k;
    q_total_ += m * k;
    largest = std::max(largest, n * m);
    // Same key on every DP rank of this shard: Q must agree across the group
    // (made on the host, the same on every backend).
    q_.push_back(powersgd::initial_q(d, m, k, seed, t.key + 1));
    error_.emplace_back(d, cfg.error_feedback ? size_t(n * m) : 0);  // zero-filled
  }
  p_buf_ = DeviceBuffer<float>(d, size_t(p_total_));
  q_buf_ = DeviceBuffer<float>(d, size_t(q_total_));
  work_ = DeviceBuffer<float>(d, size_t(largest));
}

void DataParallelPowerSgd::reduce(float* grads, DataParallelGroup group, PhaseTimers& timers) {
  Communicator& dp = group.device;
  kernels::Ops& ops = ops_;
  const float inv = 1.0f / float(dp.size());
  {
    ScopedPhase t(timers, "compress");
    for (size_t i = 0; i < slots_.size(); ++i) {
      const Slot& s = slots_[i];
      float* g = grads + s.offset;
      if (cfg_.error_feedback) ops.axpy(g, 1.0f, error_[i].data(), s.n * s.m);  // M = grad + residual
      powersgd::left_project(ops, g, q_[i].data(), p_buf_.data() + s.p_off, s.n, s.m, s.k);
    }
  }
  {
    ScopedPhase t(timers, "dp_allreduce", "dp_allreduce P");
    dp.allreduce_sum(p_buf_.data(), size_t(p_total_), Traffic::DataParallel);
  }
  {
    ScopedPhase t(timers, "compress");
    for (size_t i = 0; i < slots_.size(); ++i) {
      const Slot& s = slots_[i];
      float* p = p_buf_.data() + s.p_off;
      ops.orthonormalize_columns(p, s.n, s.k);
      powersgd::right_project(ops, grads + s.offset, p, q_buf_.data() + s.q_off, s.n, s.m, s.k);
    }
  }
  {
    ScopedPhase t(timers, "dp_allreduce", "dp_allreduce Q");
    dp.allreduce_sum(q_buf_.data(), size_t(q_total_), Traffic::DataParallel);
  }
  // Saved versus a dense ring all-reduce of the same gradients (2(n-1)/n of
  // them per rank) on the run's gradient wire; the factors travel in fp32.
  int64_t dense = 0;
  for (const Slot& s : slots_) dense += s.n * s.m;
  const double n = double(dp.size());
  group.host.counters().add_saved(
      Traffic::DataParallel, int64_t(2.0 * (n - 1) / n *
                                     (double(wire_value_bytes(group.wire)) * double(dense) -
                                      4.0 * double(p_total_ + q_total_))));
  ScopedPhase t(timers, "decompress");
  ops.scale(q_buf_.data(), inv, q_total_);
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    float* g = grads + s.offset;
    const float* p = p_buf_.data() + s.p_off;
    const float* q = q_buf_.data() + s.q_off;
    powersgd::reconstruct(ops, p, q, work_.data(), s.n, s.m, s.k);
    if (cfg_.error_feedback) {  // residual = M - P Q^T
      ops.copy(error_[i].data(), g, s.n * s.m);
      ops.axpy(error_[i].data(), -1.0f, work_.data(), s.n * s.m);
    }
    ops.copy(g, work_.data(), s.n * s.m);
    ops.copy(q_[i].data(), q, s.m * s.k);
  }
}

void DataParallelPowerSgd::save_state(TensorFileWriter& w) const {
  for (size_t i = 0; i < slots_.size(); ++i) {
    const std::string name = "dp/" + tensors_[i].name;
    save_device_state(w, name + "/q", q_[i], {slots_[i].m, slots_[i].k});
    if (cfg_.error_feedback) save_device_state(w, name + "/error", error_[i], {slots_[i].n, slots_[i].m});
  }
}

bool DataParallelPowerSgd::load_state(const TensorFileReader& r) {
  bool complete = true;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const std::string name = "dp/" + tensors_[i].name;
    if (r.has(name + "/q") && r.shape(name + "/q") == std::vector<int64_t>{slots_[i].m, slots_[i].k})
      load_device_state(r, name + "/q", q_[i]);
    else
      complete = false;
    if (!cfg_.error_feedback) continue;
    if (r.has(name + "/error") && r.numel(name + "/error") == int64_t(error_[i].size()))
      load_device_state(r, name + "/error", error_[i]);
    else
      complete = false;
  }
  return complete;
}

}  // namespace occ
