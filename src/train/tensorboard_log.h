#pragma once
// The metrics rows of a run as TensorBoard scalars (--tensorboard-dir), written by
// the logging rank into one event file (train/tensorboard_writer.h). Tags are
// Megatron's where it has the quantity, ours otherwise:
//   every --tensorboard-log-interval iterations: "lm loss", "learning-rate",
//     "grad-norm", "loss-scale" (--fp16), "tokens-per-sec", "bytes/<class>" (bytes
//     all ranks sent per traffic class), "bytes-saved/<class>" (what compression kept
//     off the wire), "lep/<ratio>" (--check-lep); with --log-timers-to-tensorboard
//     "iteration-time" and "<phase>-time" per timer phase (seconds, the slowest rank;
//     Megatron's names where it has the phase: forward-compute, backward-compute,
//     optimizer, batch-generator, all-grads-sync, embedding-grads-all-reduce);
//   whenever evaluated: "lm loss validation" (and "lm loss validation ppl" with
//     --log-validation-ppl-to-tensorboard), "lm loss test" (and "lm loss test ppl").
// Values are the metrics JSONL's, as float; timers converted from ms to seconds.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/tensorboard_writer.h"

namespace occ {

struct TensorBoardOptions {
  std::string dir;                       // --tensorboard-dir ("" = off)
  int64_t log_interval = 1;              // --tensorboard-log-interval
  bool timers = false;                   // --log-timers-to-tensorboard
  bool validation_ppl = false;           // --log-validation-ppl-to-tensorboard
};

// The scalars of one metrics row (iteration_row + summarize_rank_metrics), by tag.
std::vector<std::pair<std::string, double>> tensorboard_scalars(const nlohmann::json& row,
                                                                const TensorBoardOptions& options);

class TensorBoardLog {
 public:
  // Opens the event file: the start-up check of --tensorboard-dir (throws a one-line occ::Error).
  explicit TensorBoardLog(TensorBoardOptions options);
  // Writes the row's scalars at its iteration. The first row of a process is preceded by
  // a restart marker at its iteration, so a resumed run replaces what an interrupted one
  // logged after its checkpoint.
  void add_row(const nlohmann::json& row);
  void flush() { writer_.flush(); }
  const std::string& path() const { return writer_.path(); }

 private:
  TensorBoardOptions options_;
  TensorBoardWriter writer_;
  bool started_ = false;
};

}  // namespace occ
