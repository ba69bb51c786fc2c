#pragma once
// `plan --auto`: searches the compression plans (FE on/off; CB off or on at a
// rank, with LEP, with or without EC; DP PowerSGD off or on at a rank on the
// first K stages) for the lowest predicted iteration time under the user's
// limits, then, among the plans within `tolerance` of that time, takes the
// one that compresses least (lossy compression costs accuracy: the paper's
// argument for SC and EC), and explains which transfers left the critical path.
//
// Quality-aware (with a LossCostTable, --max-loss-increase): the candidates are
// the settings the compressor sweep measured, on each link class (activation
// compression, CB by any method, DP by any method, with EC / SC variants and
// FE); each plan's expected loss cost comes from the table (loss_costs.h);
// the fastest plan whose cost is within the budget wins, and among plans
// within `tolerance` of its time, the one with the lowest cost.
//
// Time to target (with a TargetRegime, --objective time-to-target): the
// candidates are the race's measured variants on the plan's model and layout,
// with the EC / SC / FE variants their measurements cover; each plan's
// iterations to the target come from the regime (time_to_target.h), its
// predicted time to target is the predicted iteration time x those
// iterations, and the lowest wins (choose_by_time_to_target).
#include <string>
#include <vector>

#include "plan/loss_costs.h"
#include "plan/model_cost.h"
#include "plan/time_to_target.h"

namespace occ::plan {

struct AutoLimits {
  double max_compressed_fraction = 1.0;  // of the DP gradient elements, PowerSGD-compressed
  int min_cb_rank = 1, min_dp_rank = 1;
  bool allow_cb = true, allow_dp = true;
  double tolerance = 0.01;  // relative: plans this close to the fastest count as equally fast
  std::vector<int> cb_ranks{4, 8, 16, 32, 64}, dp_ranks{16, 32, 64, 128, 256};
  // Quality-aware mode: measured loss costs and the budget in % of the baseline's loss.
  const LossCostTable* loss_costs = nullptr;
  double max_loss_increase = 0.5;
  // Time-to-target mode: the regime's measured iterations to its target.
  const TargetRegime* target = nullptr;
};

struct Candidate {
  PlanConfig cfg;
  double seconds = 0;
  double compressed_fraction = 0;  // DP gradient elements compressed / all
  double cb_fraction = 0;          // backward messages compressed / all
  LossEstimate loss;               // quality-aware mode: expected loss cost
  IterationsEstimate iterations;   // time-to-target mode: iterations to the target
  double time_to_target() const { return seconds * iterations.iterations; }
};

struct AutoResult {
  Candidate baseline, fastest, chosen;
  int evaluated = 0;
  int within_budget = 0;  // quality-aware mode: plans whose loss cost is known and within the budget
  std::vector<std::string> explanation;  // why: the critical path before and after
  // Time-to-target mode: every candidate, eligible or not, fastest to target first.
  std::vector<Candidate> considered;
  bool none_eligible = false;  // no candidate reached the target: chosen is the baseline
};

AutoResult auto_plan(const PlanConfig& base, const AutoLimits& limits, const Measured* measured);

// The train flags of a plan's compression settings.
std::string compression_flags(const PlanConfig& cfg);
// One line describing them ("none" when nothing is on).
std::string compression_summary(const PlanConfig& cfg);

}  // namespace occ::plan
