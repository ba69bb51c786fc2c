#pragma once
// Names a rank that computes consistently slower than its peers: the ranks of
// its pipeline stage (its tensor-parallel shards and data-parallel replicas do
// the same work), compared on their compute time per iteration (forward +
// backward + optimizer: the waits, which a straggler's peers pay for it, excluded).
// A slow or overloaded node or GPU shows up here before it shows in the loss curve.
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace occ {

class StragglerWatch {
 public:
  // Warns about a rank whose compute time over the last `window` iterations
  // exceeds its stage peers' median by more than `margin` (0.25: 25 %), and
  // which was the slower one in at least 3/4 of those iterations.
  explicit StragglerWatch(int window = 50, double margin = 0.25);

  // One iteration's per-rank metrics (gather_rank_metrics: "rank", "pp",
  // "timers"). Returns the warning line ("" if none; said once per straggler
  // until it recovers) and adds to `row` the per-rank compute statistics:
  // "compute_ms": {"min", "median", "max", "slowest_rank"}.
  std::string observe(const nlohmann::json& ranks, nlohmann::json& row);

 private:
  int window_;
  double margin_;
  std::deque<std::vector<double>> history_;  // per iteration: compute ms by world rank
  std::vector<int> stage_of_;                // world rank -> pipeline stage
  std::vector<bool> warned_;                 // per rank: already named
};

}  // namespace occ
