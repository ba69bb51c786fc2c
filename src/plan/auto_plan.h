#pragma once
// `plan --auto`: searches the compression plans (FE on/off; CB off or on at a
// rank, with LEP, with or without EC; DP PowerSGD off or on at a rank on the
// first K stages) for the lowest predicted iteration time under the user's
// limits, then, among the plans within `tolerance` of that time, takes the
// one that compresses least (lossy compression costs accuracy: the paper's
// argument for SC and EC), and explains which transfers left the critical path.
#include <string>
#include <vector>

#include "plan/model_cost.h"

namespace occ::plan {

struct AutoLimits {
  double max_compressed_fraction = 1.0;  // of the DP gradient elements, PowerSGD-compressed
  int min_cb_rank = 1, min_dp_rank = 1;
  bool allow_cb = true, allow_dp = true;
  double tolerance = 0.01;  // relative: plans this close to the fastest count as equally fast
  std::vector<int> cb_ranks{4, 8, 16, 32, 64}, dp_ranks{16, 32, 64, 128, 256};
};

struct Candidate {
  PlanConfig cfg;
  double seconds = 0;
  double compressed_fraction = 0;  // DP gradient elements compressed / all
  double cb_fraction = 0;          // backward messages compressed / all
};

struct AutoResult {
  Candidate baseline, fastest, chosen;
  int evaluated = 0;
  std::vector<std::string> explanation;  // why: the critical path before and after
};

AutoResult auto_plan(const PlanConfig& base, const AutoLimits& limits, const Measured* measured);

// The train flags of a plan's compression settings.
std::string compression_flags(const PlanConfig& cfg);
// One line describing them ("none" when nothing is on).
std::string compression_summary(const PlanConfig& cfg);

}  // namespace occ::plan
