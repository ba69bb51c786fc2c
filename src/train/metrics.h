#pragma once
// Per-rank instrumentation gathered on rank 0: phase timers and bytes sent per
// traffic class, for the metrics JSONL; and the Chrome/Perfetto trace.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/timer.h"
#include "parallel/topology.h"

namespace occ {

// Phases reported per rank (milliseconds; "iteration" is the rank's wall time,
// "cpu" the CPU time its threads used, so iteration - cpu is time spent
// yielding the core while waiting; "peak_rss_mib" its peak resident memory).
extern const std::vector<std::string> kReportedPhases;

// Collective over the world: returns, on rank 0, one object per rank
// {"rank","tp","pp","dp","timers":{...},"bytes":{...}}; an empty array elsewhere.
nlohmann::json gather_rank_metrics(Topology& topo, const PhaseTimers& timers);
// Adds "timers" (max over ranks per phase), "bytes" (sum over ranks per class),
// "stages" (per pipeline stage: mean timers, summed bytes) and "ranks" to `row`.
void summarize_rank_metrics(const nlohmann::json& ranks, nlohmann::json& row);

// Collective: gathers every rank's events; rank 0 writes {"traceEvents": [...]}
// with one process per rank (thread 0 compute + pipeline, thread 1 DP reducer).
void write_chrome_trace(Topology& topo, const std::vector<TraceEvent>& events, const std::string& path);

// Peak resident set size of this process, in MiB.
double peak_rss_mib();

}  // namespace occ
