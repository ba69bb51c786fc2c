#include "train/straggler_watch.h"

#include <algorithm>

#include <fmt/format.h>

namespace occ {

namespace {
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
}  // namespace

StragglerWatch::StragglerWatch(int window, double margin) : window_(window), margin_(margin) {}

std::string StragglerWatch::observe(const nlohmann::json& ranks, nlohmann::json& row) {
  const size_t n = ranks.size();
  if (n < 2) return "";
  std::vector<double> compute(n, 0.0);
  stage_of_.assign(n, 0);
  for (const auto& r : ranks) {
    const size_t i = size_t(r["rank"].get<int>());
    if (i >= n) return "";
    const auto& t = r["timers"];
    compute[i] = t.value("forward", 0.0) + t.value("backward", 0.0) + t.value("optimizer", 0.0);
    stage_of_[i] = r["pp"].get<int>();
  }
  const auto slowest = std::max_element(compute.begin(), compute.end()) - compute.begin();
  row["compute_ms"] = {{"min", *std::min_element(compute.begin(), compute.end())},
                       {"median", median(compute)},
                       {"max", compute[size_t(slowest)]},
                       {"slowest_rank", slowest}};
  history_.push_back(compute);
  if (int(history_.size()) > window_) history_.pop_front();
  if (int(history_.size()) < window_) return "";

  // Per rank: its total over the window against its stage peers' median total,
  // and in how many iterations it was above their median.
  std::vector<double> total(n, 0.0);
  for (const auto& it : history_)
    for (size_t i = 0; i < n; ++i) total[i] += it[i];
  int worst = -1;
  double worst_ratio = 1.0, worst_peers = 0;
  for (size_t i = 0; i < n; ++i) {
    std::vector<double> peers;
    for (size_t j = 0; j < n; ++j)
      if (j != i && stage_of_[j] == stage_of_[i]) peers.push_back(total[j]);
    if (peers.empty()) continue;
    const double peer_median = median(peers);
    if (peer_median <= 0) continue;
    int slower = 0;
    for (const auto& it : history_) {
      std::vector<double> p;
      for (size_t j = 0; j < n; ++j)
        if (j != i && stage_of_[j] == stage_of_[i]) p.push_back(it[j]);
      slower += it[i] > median(p) ? 1 : 0;
    }
    const double ratio = total[i] / peer_median;
    if (ratio > 1.0 + margin_ && slower * 4 >= window_ * 3 && ratio > worst_ratio) {
      worst = int(i);
      worst_ratio = ratio;
      worst_peers = peer_median;
    }
  }
  if (worst < 0) return "";
  row["straggler"] = {{"rank", worst}, {"slower_by", worst_ratio - 1.0}};
  warned_.resize(n, false);
  if (warned_[size_t(worst)]) return "";
  warned_[size_t(worst)] = true;
  return fmt::format("warning: rank {} (pipeline stage {}) computed {:.0f} % slower than the other ranks of its stage "
                     "over the last {} iterations ({:.1f} vs {:.1f} ms per iteration of forward, backward and "
                     "optimizer; their waits for it excluded): a slow or overloaded node or GPU?",
                     worst, stage_of_[size_t(worst)], (worst_ratio - 1.0) * 100, window_,
                     total[size_t(worst)] / window_, worst_peers / window_);
}

}  // namespace occ
