#pragma once
// DiLoCo's costs in the planner (train/diloco.h runs them): no per-step DP
// traffic; every H inner steps one all-reduce of each fragment's parameters
// over the DP group (fp32, the engine's ring), or with compressed outer
// gradients an encode, an all-gather of the D wires and D decodes; then the
// outer step and the merge (memory-bound passes over the fragment) on the main
// thread. With --diloco-overlap-steps tau the collective runs beside the next
// tau inner iterations, so only what outlasts them is exposed (the link is
// assumed free of the pipeline's traffic meanwhile, as DP and pipeline traffic
// are throughout the planner). Stages sync a fragment at the same iteration
// and the pipeline couples them, so a sync costs the slowest stage's exposed
// time. The outer parameters and momentum (8 bytes per parameter, in host
// memory: the engine keeps them there; 12 with --diloco-outer-comp-error-feedback,
// whose residual sits beside them) are the rank's extra memory.
#include <functional>
#include <vector>

#include "model/params.h"
#include "plan/cluster.h"
#include "train/diloco_config.h"

namespace occ::plan {

struct DilocoFragmentCost {
  double elements = 0;       // this stage's parameters in the fragment
  double bytes = 0;          // per rank per sync on the DP wire
  double link_seconds = 0;   // the collective
  double main_seconds = 0;   // encode / decode, outer step and merge on the main thread
};

struct DilocoCost {
  bool on = false;
  int inner_steps = 0, overlap = 0;
  std::vector<std::vector<DilocoFragmentCost>> stages;  // [stage][fragment]
  // The seconds one round (H inner steps) adds beyond H inner iterations of `inner` seconds.
  double per_round(double inner) const;
  // The same per iteration: a round's extra over H.
  double amortized(double inner) const { return on ? per_round(inner) / inner_steps : 0.0; }
  // Mean DP bytes per rank per iteration of a stage.
  double bytes_per_iteration(int stage) const;
};

// One stage's fragments. kernel(flops, bytes): the seconds of a kernel (the
// cost model's roofline); D the DP size; link and sharing the DP group's.
std::vector<DilocoFragmentCost> diloco_stage_cost(const DilocoConfig& cfg, const ParamLayout& layout, int num_layers,
                                                  int D, const LinkSpec& link, int sharing,
                                                  const std::function<double(double, double)>& kernel);

}  // namespace occ::plan
