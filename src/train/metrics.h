#pragma once
// Per-rank instrumentation gathered on rank 0: phase timers and bytes sent per
// traffic class, for the metrics JSONL; and the Chrome/Perfetto trace.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/timer.h"
#include "core/wire_format.h"
#include "parallel/topology.h"

namespace occ {

// What one training iteration reports.
struct IterationStats {
  int64_t iteration = 0;
  double loss = 0, grad_norm = 0, ms = 0, tokens_per_s = 0;
  float lr = 0;
  std::optional<double> val_loss;
  std::optional<double> test_loss;  // after the last iteration, where there is a test set
  // --fp16: the loss scale this iteration used, and the iterations skipped so far (overflow).
  std::optional<float> loss_scale;
  int64_t skipped_iters = 0;
  int64_t skipped_nonfinite = 0;  // iterations skipped by --skip-nonfinite so far
};

// The iteration's own fields of a metrics JSONL row (summarize_rank_metrics adds the rest).
nlohmann::json iteration_row(const IterationStats& s, int64_t consumed_samples);
// The progress line: iteration/total, loss, lr, grad norm, tokens/s, ms/iteration, ETA.
std::string progress_line(const IterationStats& s, int64_t train_iters, double eta_seconds);

// Phases reported per rank (milliseconds; "iteration" is the rank's wall time,
// "cpu" the CPU time its threads used, so iteration - cpu is time spent
// yielding the core while waiting; "peak_rss_mib" its peak resident memory,
// "peak_tensor_mib" the peak of its DeviceBuffers, "peak_gpu_mib" of those on a GPU).
extern const std::vector<std::string> kReportedPhases;

// Collective over the world: returns, on rank 0, one object per rank
// {"rank","tp","pp","dp","timers":{...},"bytes":{...}}; an empty array elsewhere.
nlohmann::json gather_rank_metrics(Topology& topo, const PhaseTimers& timers);
// Adds "timers" (max over ranks per phase), "bytes" (sum over ranks per class),
// "stages" (per pipeline stage: mean timers, summed bytes) and "ranks" to `row`.
void summarize_rank_metrics(const nlohmann::json& ranks, nlohmann::json& row);

// The format uncompressed values of each traffic class travel in (core/
// wire_format.h), for the metrics rows' "wire": {"pp_fwd": "bf16", "pp_bwd":
// "bf16", "tp": "bf16", "dp": "fp32", "emb": "fp32", "other": "fp32"}. tp with
// --tp-reduce-in-fp32: "bf16, sums fp32"; dp with the distributed optimizer
// (sharded), whose parameters travel as activations do: "fp32 gradients, bf16
// parameters". Compressed messages are their codec's bytes; what compression
// saved is counted against these formats.
nlohmann::json wire_json(const WireFormats& wire, bool sharded);

// Bytes all ranks sent per class over a run, and what compression kept off
// the wire: summed from the metrics rows, printed at the end of a distributed run.
class TrafficTotals {
 public:
  // A row completed by summarize_rank_metrics ("bytes", optional "bytes_saved", "wire").
  void add(const nlohmann::json& row);
  // "traffic over N iterations (all ranks): pp_fwd 1.2 MB bf16, pp_bwd 0.3 MB bf16
  // (1.2 MB without compression), ..."
  void print(int64_t iterations) const;

 private:
  nlohmann::json sent_ = nlohmann::json::object(), saved_ = nlohmann::json::object();
  nlohmann::json wire_ = nlohmann::json::object();
};

// Collective: gathers every rank's events; rank 0 writes {"traceEvents": [...]}
// with one process per rank (thread 0 compute + pipeline, thread 1 DP reducer).
void write_chrome_trace(Topology& topo, const std::vector<TraceEvent>& events, const std::string& path);

// Peak resident set size of this process, in MiB.
double peak_rss_mib();
// Peak bytes held in DeviceBuffers (model, optimizer, activations, scratch) on
// either device, in MiB: what activation recomputation shrinks, measured exactly.
double peak_tensor_mib();

}  // namespace occ
