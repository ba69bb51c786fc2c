#include "compress/dp_powersgd.h"

#include <algorithm>

#include "compress/powersgd.h"

namespace occ {

DataParallelPowerSgd::DataParallelPowerSgd(const GradCompressionConfig& cfg, std::vector<TensorDesc> tensors,
                                           uint64_t seed)
    : cfg_(cfg), tensors_(std::move(tensors)) {
  for (const auto& t : tensors_) {
    const int64_t n = t.rows, m = t.cols, k = powersgd::effective_rank(n, m, cfg.rank);
    slots_.push_back({t.offset, n, m, k, p_total_, q_total_});
    p_total_ += n * k;
    q_total_ += m * k;
    // Same key on every DP rank of this shard: Q must agree across the group.
    q_.emplace_back(size_t(m * k));
    powersgd::init_q(q_.back().data(), m, k, seed, t.key + 1);
    error_.emplace_back(cfg.error_feedback ? size_t(n * m) : 0, 0.0f);
  }
  p_buf_.resize(size_t(p_total_));
  q_buf_.resize(size_t(q_total_));
}

void DataParallelPowerSgd::reduce(float* grads, MpiCommunicator& dp, PhaseTimers& timers) {
  const float inv = 1.0f / float(dp.size());
  {
    ScopedPhase t(timers, "compress");
    for (size_t i = 0; i < slots_.size(); ++i) {
      const Slot& s = slots_[i];
      float* g = grads + s.offset;
      if (cfg_.error_feedback)
        for (int64_t j = 0; j < s.n * s.m; ++j) g[j] += error_[i][size_t(j)];  // M = grad + residual
      powersgd::left_project(g, q_[i].data(), p_buf_.data() + s.p_off, s.n, s.m, s.k);
    }
  }
  {
    ScopedPhase t(timers, "dp_allreduce", "dp_allreduce P");
    dp.allreduce_sum(p_buf_.data(), p_buf_.size(), Traffic::DataParallel);
  }
  {
    ScopedPhase t(timers, "compress");
    for (size_t i = 0; i < slots_.size(); ++i) {
      const Slot& s = slots_[i];
      float* p = p_buf_.data() + s.p_off;
      powersgd::orthonormalize(p, s.n, s.k);
      powersgd::right_project(grads + s.offset, p, q_buf_.data() + s.q_off, s.n, s.m, s.k);
    }
  }
  {
    ScopedPhase t(timers, "dp_allreduce", "dp_allreduce Q");
    dp.allreduce_sum(q_buf_.data(), q_buf_.size(), Traffic::DataParallel);
  }
  // Saved versus a dense ring all-reduce of the same gradients (2(n-1)/n of them per rank).
  int64_t dense = 0;
  for (const Slot& s : slots_) dense += s.n * s.m;
  const int64_t n = dp.size();
  dp.counters().add_saved(Traffic::DataParallel,
                          int64_t(4.0 * 2.0 * double(n - 1) / double(n) * double(dense - p_total_ - q_total_)));
  ScopedPhase t(timers, "decompress");
  for (float& v : q_buf_) v *= inv;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    float* g = grads + s.offset;
    const float* p = p_buf_.data() + s.p_off;
    const float* q = q_buf_.data() + s.q_off;
    work_.resize(size_t(s.n * s.m));
    powersgd::reconstruct(p, q, work_.data(), s.n, s.m, s.k);
    if (cfg_.error_feedback)
      for (int64_t j = 0; j < s.n * s.m; ++j) error_[i][size_t(j)] = g[j] - work_[size_t(j)];
    std::copy(work_.begin(), work_.end(), g);
    q_[i].assign(q, q + s.m * s.k);
  }
}

void DataParallelPowerSgd::save_state(TensorFileWriter& w) const {
  for (size_t i = 0; i < slots_.size(); ++i) {
    const std::string name = "dp/" + tensors_[i].name;
    w.add(name + "/q", q_[i].data(), {slots_[i].m, slots_[i].k});
    if (cfg_.error_feedback) w.add(name + "/error", error_[i].data(), {slots_[i].n, slots_[i].m});
  }
}

bool DataParallelPowerSgd::load_state(const TensorFileReader& r) {
  bool complete = true;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const std::string name = "dp/" + tensors_[i].name;
    if (r.has(name + "/q") && r.shape(name + "/q") == std::vector<int64_t>{slots_[i].m, slots_[i].k})
      r.read(name + "/q", q_[i].data(), int64_t(q_[i].size()));
    else
      complete = false;
    if (!cfg_.error_feedback) continue;
    if (r.has(name + "/error") && r.numel(name + "/error") == int64_t(error_[i].size()))
      r.read(name + "/error", error_[i].data(), int64_t(error_[i].size()));
    else
      complete = false;
  }
  return complete;
}

}  // namespace occ
