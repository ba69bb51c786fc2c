#include "plan/calibrate.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace occ::plan {

namespace {

// One rank's entry of a metrics row: its coordinates and its stage timers (s).
struct RankRow {
  int tp = 0, pp = 0, dp = 0;
  std::map<std::string, double> timers;
};
struct MetricsRow {
  std::optional<int64_t> iter;
  double ms = 0;
  int tp = 1, pp = 1, dp = 1;  // the layout its ranks span
  std::vector<RankRow> ranks;
};

// Reads and validates every row, so that the fits below can trust the values:
// each row an object with "ms" (a finite, non-negative number) and "ranks"
// covering every (tp, pp, dp) of its layout exactly once, timers finite and
// non-negative. Any defect is a one-line UsageError naming the line.
std::vector<MetricsRow> read_rows(const std::string& path) {
  constexpr int kMaxParallel = 1 << 16;  // per dimension: far beyond any real job
  std::ifstream in(path);
  if (!in.good()) throw UsageError(fmt::format("cannot open --calibrate file {}; check the path", path));
  std::vector<MetricsRow> rows;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto bad = [&](const std::string& what) {
      throw UsageError(fmt::format("--calibrate file {} line {} {}; give the JSONL that train --metrics wrote", path,
                                   n, what));
    };
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) bad("is not JSON");
    if (!j.is_object() || !j.contains("ranks") || !j["ranks"].is_array() || j["ranks"].empty() || !j.contains("ms"))
      bad("has no per-rank metrics ('ranks', 'ms')");
    MetricsRow row;
    if (!j["ms"].is_number() || !std::isfinite(j["ms"].get<double>()) || j["ms"].get<double>() < 0)
      bad("has an 'ms' that is not a non-negative number");
    row.ms = j["ms"].get<double>();
    if (j.contains("iter")) {
      if (!j["iter"].is_number_integer()) bad("has an 'iter' that is not an integer");
      row.iter = j["iter"].get<int64_t>();
    }
    std::set<std::tuple<int, int, int>> seen;
    for (const auto& r : j["ranks"]) {
      RankRow rr;
      if (!r.is_object()) bad("has a rank entry that is not an object");
      for (auto [key, field] : {std::pair{"tp", &rr.tp}, std::pair{"pp", &rr.pp}, std::pair{"dp", &rr.dp}}) {
        if (!r.contains(key) || !r[key].is_number_integer() || r[key].get<int64_t>() < 0 ||
            r[key].get<int64_t>() >= kMaxParallel)
          bad(fmt::format("has a rank without a '{}' index in [0, {})", key, kMaxParallel));
        *field = r[key].get<int>();
      }
      if (!seen.emplace(rr.tp, rr.pp, rr.dp).second)
        bad(fmt::format("lists rank (tp {}, pp {}, dp {}) twice", rr.tp, rr.pp, rr.dp));
      if (r.contains("timers")) {
        if (!r["timers"].is_object()) bad("has 'timers' that are not an object");
        for (const auto& [name, value] : r["timers"].items()) {
          if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < 0)
            bad("has a timer that is not a non-negative number");
          rr.timers[name] = value.get<double>() / 1e3;
        }
      }
      row.tp = std::max(row.tp, rr.tp + 1), row.pp = std::max(row.pp, rr.pp + 1), row.dp = std::max(row.dp, rr.dp + 1);
      row.ranks.push_back(std::move(rr));
    }
    // Distinct coordinates, as many as the layout's ranks: every rank is there.
    if (int64_t(row.tp) * row.pp * row.dp != int64_t(row.ranks.size()))
      bad(fmt::format("has {} ranks, not the {} x {} x {} of a whole tensor x pipeline x data layout",
                      row.ranks.size(), row.tp, row.pp, row.dp));
    rows.push_back(std::move(row));
  }
  if (rows.empty()) throw UsageError(fmt::format("--calibrate file {} holds no metrics rows; run train with --metrics", path));
  return rows;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double timer(const RankRow& rank, const char* name) {
  auto it = rank.timers.find(name);
  return it == rank.timers.end() ? 0.0 : it->second;
}

}  // namespace

void metrics_layout(const std::string& path, int& tp, int& pp, int& dp) {
  const MetricsRow last = read_rows(path).back();
  tp = last.tp, pp = last.pp, dp = last.dp;
}

Calibration calibrate(const std::string& path, const PlanConfig& cfg_in, bool inter_from_flags, bool intra_from_flags,
                      int skip) {
  const auto all = read_rows(path);
  Calibration c;
  metrics_layout(path, c.tp, c.pp, c.dp);
  PlanConfig cfg = cfg_in;
  cfg.tp = c.tp, cfg.pp = c.pp, cfg.dp = c.dp;
  cfg.validate();
  // Warm-up: the first iteration of every run in the file (rows restart at iter 1).
  if (skip < 0) skip = 1;
  std::vector<MetricsRow> rows;
  for (const auto& r : all)
    if (!r.iter || *r.iter > skip) rows.push_back(r);
  if (rows.empty()) rows = all;
  c.rows_used = int(rows.size());
  const int T = c.tp, P = c.pp, D = c.dp, M = cfg.micro_batches();
  for (const auto& r : rows)
    if (r.tp != T || r.pp != P || r.dp != D)
      throw UsageError(fmt::format("--calibrate file {}: rows disagree on the layout (T{} P{} D{} and T{} P{} D{}); "
                                   "calibrate on the metrics of one run", path, r.tp, r.pp, r.dp, T, P, D));

  // The model's own view of the calibrated run (FLOPs, buckets, TP counts).
  const CostModel model = build_cost_model(cfg);
  std::vector<double> ms;
  for (const auto& r : rows) ms.push_back(r.ms);
  c.measured_ms = median(ms);

  // Per stage: means over the stage's ranks, medians over rows.
  c.measured.stages.resize(size_t(P));
  double flops = 0, seconds = 0, opt_per_elem = 1e300;
  for (int s = 0; s < P; ++s) {
    std::vector<double> f, b, tp, opt;
    for (const auto& row : rows) {
      double fs = 0, bs = 0, ts = 0, os = 1e300;
      int n = 0;
      for (const auto& r : row.ranks) {
        if (r.pp != s) continue;
        fs += timer(r, "forward") + timer(r, "data"), bs += timer(r, "backward");
        // The layers' TP collectives: all-reduces, or in a --sequence-parallel run (the one
        // with reduce-scatters) reduce-scatters and all-gathers; such a run has no pipeline
        // receiver's all-gather, so its tp_allgather is the layers'.
        const double reduce_scatter = timer(r, "tp_reduce_scatter");
        ts += timer(r, "tp_allreduce") + reduce_scatter + (reduce_scatter > 0 ? timer(r, "tp_allgather") : 0.0);
        os = std::min(os, timer(r, "optimizer"));  // the least waiting rank: the optimizer alone
        ++n;
      }
      f.push_back(fs / n / M), b.push_back(bs / n / M), tp.push_back(ts / n / M), opt.push_back(os);
    }
    StageMeasure& m = c.measured.stages[size_t(s)];
    m.forward = median(f), m.backward = median(b);
    // Split the TP all-reduce time like the model's counts (forward : backward).
    const bool first = s == 0, last = s == P - 1;
    const int Ls = cfg.model.num_layers / P;
    const double nf = 2 * Ls + (first ? 1 : 0), nb = 2 * Ls + (last ? 1 : 0);
    m.tp_forward = median(tp) * nf / (nf + nb), m.tp_backward = median(tp) * nb / (nf + nb);
    flops += model.facts[size_t(s)].forward_flops + model.facts[size_t(s)].backward_flops;
    seconds += m.forward + m.backward;
    opt_per_elem = std::min(opt_per_elem, median(opt) / double(std::max<int64_t>(model.facts[size_t(s)].params, 1)));
  }
  for (int s = 0; s < P; ++s)
    c.measured.stages[size_t(s)].optimizer = opt_per_elem * double(model.facts[size_t(s)].params);
  if (!(seconds > 0))
    throw UsageError(fmt::format("--calibrate file {} records no forward or backward time; calibrate on the metrics "
                                 "of a run that trained", path));
  c.measured.achieved_flops = flops / seconds;
  c.report.push_back(fmt::format("calibrated on {} rows of {} (T{} P{} D{}, {} micro-batches): median {:.1f} ms/iter",
                                 c.rows_used, path, T, P, D, M, c.measured_ms));
  for (int s = 0; s < P; ++s) {
    const StageMeasure& m = c.measured.stages[size_t(s)];
    c.report.push_back(fmt::format("  stage {}: forward {:.3f} ms, backward {:.3f} ms per micro-batch (+ TP all-reduce "
                                   "{:.3f} / {:.3f} ms), optimizer {:.3f} ms",
                                   s, m.forward * 1e3, m.backward * 1e3, m.tp_forward * 1e3, m.tp_backward * 1e3,
                                   m.optimizer * 1e3));
  }
  c.report.push_back(fmt::format("  achieved compute rate {:.3g} FLOP/s per rank (model FLOPs / measured compute)",
                                 c.measured.achieved_flops));

  // Inter-node link: stage s's DP reducer ran `steps` ring steps carrying
  // `bytes`; its least-waiting rank's busy time = steps * latency + bytes / bw.
  c.inter = cfg.cluster.inter;
  c.inter_source = "flags (--inter-node-bandwidth / --inter-node-latency)";
  if (!inter_from_flags && D > 1) {
    std::vector<double> steps, bytes, busy;
    for (int s = 0; s < P; ++s) {
      const auto& st = model.input.stages[size_t(s)];
      double b = 0;
      for (const auto& bk : st.buckets) b += bk.bytes * 2.0 * (D - 1) / D;
      std::vector<double> t;
      for (const auto& row : rows) {
        double least = 1e300;
        for (const auto& r : row.ranks)
          if (r.pp == s) least = std::min(least, timer(r, "dp_busy"));
        t.push_back(least);
      }
      if (st.buckets.empty()) continue;
      steps.push_back(double(st.buckets.size()) * 2.0 * (D - 1));
      bytes.push_back(b * node_sharing(cfg, rank_of(cfg, s, 0, 0), s));  // the node's NIC carries all of them
      busy.push_back(median(t));
    }
    // Least squares for (latency, 1 / bandwidth); positive solutions only.
    double saa = 0, sab = 0, sbb = 0, sat = 0, sbt = 0, sb = 0, st = 0;
    for (size_t i = 0; i < busy.size(); ++i) {
      saa += steps[i] * steps[i], sab += steps[i] * bytes[i], sbb += bytes[i] * bytes[i];
      sat += steps[i] * busy[i], sbt += bytes[i] * busy[i], sb += bytes[i], st += busy[i];
    }
    const double det = saa * sbb - sab * sab;
    const double lat = det != 0 ? (sat * sbb - sab * sbt) / det : -1, inv_bw = det != 0 ? (saa * sbt - sab * sat) / det : -1;
    const bool conditioned = busy.size() >= 2 && std::abs(det) > 1e-6 * saa * sbb;
    if (conditioned && lat > 0 && inv_bw > 0) {
      c.inter = {1.0 / inv_bw, lat};
      c.inter_source = fmt::format("fitted: DP reducer busy time vs bytes and ring steps on {} stages", busy.size());
    } else if (sb > 0 && st > 0) {
      c.inter = {sb / st, 0.0};
      c.inter_source = "fitted bandwidth only (DP reducer busy time / bytes; latency not identifiable from these "
                       "stages, set to 0)";
    }
  } else if (!inter_from_flags) {
    c.inter_source = "flags (DP = 1: no DP all-reduce to fit the link from)";
  }
  c.report.push_back(fmt::format("  inter-node link: {:.3g} B/s, latency {:.3g} s — {}", c.inter.bandwidth,
                                 c.inter.latency, c.inter_source));

  // Main-thread message latency: the intercept above is the DP reducer
  // thread's cost per ring step (its wake-up and hand-shake with the peer
  // reducer, under CPU contention), not a property of a single message. The
  // grad-norm all-reduce moves 8 bytes, so the least-waiting rank's time in it
  // over its ring steps is the per-message cost of the main thread; nonblocking
  // pipeline sends (progressed in the background) and the loss all-reduce use it.
  if (!inter_from_flags && D * P > 1 && c.inter.latency > 0) {
    const int group = T * P;  // the model group: one rank per (stage, TP rank)
    std::vector<double> t;
    for (const auto& row : rows) {
      double least = 1e300;
      bool any = false;
      for (const auto& r : row.ranks)
        if (r.timers.count("norm_allreduce")) least = std::min(least, timer(r, "norm_allreduce")), any = true;
      if (any) t.push_back(least);
    }
    if (group > 1 && !t.empty()) {
      const double per_step = median(t) / (2.0 * (group - 1));
      c.inter.p2p_latency = std::min(per_step, c.inter.latency);
      c.report.push_back(fmt::format("  main-thread message latency {:.3g} s (p2p sends, scalar all-reduces) — fitted: "
                                     "least-waiting rank's grad-norm all-reduce time / {} ring steps",
                                     c.inter.p2p_latency, 2 * (group - 1)));
    }
  }

  // Intra-node link (only the TP all-gather after receives uses it).
  c.intra = cfg.cluster.intra;
  c.intra_source = "flags (--intra-node-bandwidth / --intra-node-latency)";
  if (!intra_from_flags && T > 1) {
    double tp_s = 0, tp_bytes = 0;
    for (int s = 0; s < P; ++s) {
      const StageMeasure& m = c.measured.stages[size_t(s)];
      const bool first = s == 0, last = s == P - 1;
      const int Ls = cfg.model.num_layers / P;
      tp_s += (m.tp_forward + m.tp_backward);
      tp_bytes += (4 * Ls + (first ? 1 : 0) + (last ? 1 : 0)) * 2.0 * (T - 1) / T * double(cfg.tokens()) *
                  cfg.model.hidden_size * cfg.tp_sum_bytes();
    }
    if (tp_s > 0) {
      c.intra = {tp_bytes / tp_s, 0.0};
      c.intra_source = "fitted bandwidth only (TP all-reduce time / bytes)";
    }
  }
  if (T > 1)
    c.report.push_back(fmt::format("  intra-node link: {:.3g} B/s, latency {:.3g} s — {}", c.intra.bandwidth,
                                   c.intra.latency, c.intra_source));
  return c;
}

}  // namespace occ::plan
