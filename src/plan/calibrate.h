#pragma once
// Calibration of the planner on a real run's metrics JSONL (train --metrics):
// per-stage forward / backward compute per micro-batch, TP all-reduce time
// and optimizer time come from the stage timers; the model's achieved FLOP/s
// from those times and the model's FLOPs; the inter-node link from the DP
// reducer's busy time against the bytes and ring steps of its buckets
// (least squares over stages; when that is ill-posed, bandwidth only, or the
// link flags). The result predicts other compression variants of the same
// model and layout (and, through FLOP/s and link, other shapes).
#include <string>
#include <vector>

#include "plan/model_cost.h"

namespace occ::plan {

struct Calibration {
  Measured measured;
  int tp = 1, pp = 1, dp = 1;
  int rows_used = 0;
  double measured_ms = 0;          // median iteration time of the rows used
  LinkSpec inter, intra;
  std::string inter_source, intra_source;
  std::vector<std::string> report;  // human-readable lines: what was fitted and how
};

// Reads the rows, skipping those with iter <= skip (warm-up; -1: 1, the first
// iteration of each run; a file may hold several runs appended).
// `cfg` supplies the model shape, batch sizes, the run's compression flags and
// link values for what cannot be fitted; its layout is replaced by the run's.
// inter_from_flags / intra_from_flags: the user gave those link values; keep them.
Calibration calibrate(const std::string& metrics_path, const PlanConfig& cfg, bool inter_from_flags,
                      bool intra_from_flags, int skip = -1);

// The layout (T, P, D) of the run that wrote the metrics file.
void metrics_layout(const std::string& metrics_path, int& tp, int& pp, int& dp);

}  // namespace occ::plan
