#include "plan/auto_plan.h"

#include <algorithm>
#include <map>
#include <tuple>

#include <fmt/format.h>

namespace occ::plan {

std::string compression_flags(const PlanConfig& c) {
  std::string f;
  if (c.cb.enabled) {
    f += fmt::format(" --inter-grad-comp --inter-grad-comp-rank {}", c.cb.rank);
    if (c.cb.epilogue_only) f += " --inter-grad-comp-epilogue-only";
  }
  if ((c.cb.enabled && c.cb.lazy_error) || (c.grad_comp.enabled && c.grad_comp.error_feedback))
    f += " --use-error-feedback";
  if (c.emb_comm_opt) f += " --emb-comm-opt";
  if (c.grad_comp.enabled) {
    f += fmt::format(" --grad-comp --grad-comp-rank {}", c.grad_comp.rank);
    if (c.grad_comp.selective_way >= 1 && c.grad_comp.selective_way < c.pp)
      f += fmt::format(" --selective-grad-comp-way {}", c.grad_comp.selective_way);
  }
  return f.empty() ? "(none)" : f.substr(1);
}

std::string compression_summary(const PlanConfig& c) {
  std::vector<std::string> parts;
  if (c.cb.enabled)
    parts.push_back(fmt::format("CB rank {}{}{}", c.cb.rank, c.cb.lazy_error ? " + LEP" : "",
                                c.cb.epilogue_only ? " + EC" : ""));
  if (c.emb_comm_opt) parts.push_back("FE");
  if (c.grad_comp.enabled)
    parts.push_back(fmt::format("DP PowerSGD rank {}{}", c.grad_comp.rank,
                                c.grad_comp.selective_way >= 1 && c.grad_comp.selective_way < c.pp
                                    ? fmt::format(" on stages < {} (SC)", c.grad_comp.selective_way)
                                    : std::string(" on every stage")));
  if (parts.empty()) return "none";
  std::string s = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) s += ", " + parts[i];
  return s;
}

namespace {

Candidate evaluate(const PlanConfig& cfg, const Measured* measured) {
  Candidate c{cfg};
  const CostModel m = build_cost_model(cfg, measured);
  c.seconds = simulate(m.input).iteration;
  double all = 0, compressed = 0;
  for (const auto& f : m.facts) all += double(f.params), compressed += double(f.compressed_params);
  c.compressed_fraction = all > 0 ? compressed / all : 0;
  const int P = cfg.pp, M = cfg.micro_batches();
  int sent = 0, comp = 0;
  for (int s = 1; s < P; ++s)
    for (int j = 0; j < M; ++j) sent += 1, comp += CompressedBackprop::compresses(cfg.cb, P, s, M, j) ? 1 : 0;
  c.cb_fraction = sent ? double(comp) / sent : 0;
  return c;
}

// Critical-path seconds per (what, stage): a node's name without its micro-batch or bucket number.
std::map<std::string, double> critical_by_kind(const SimResult& r) {
  std::map<std::string, double> out;
  for (size_t i = 0; i < r.critical_path.size(); ++i) {
    const SimNode& n = r.nodes[size_t(r.critical_path[i])];
    const double join = i + 1 < r.critical_path.size() ? r.nodes[size_t(r.critical_path[i + 1])].start : n.end;
    std::string key;
    if (n.category == Category::Compute) key = fmt::format("s{} compute", n.stage);
    else if (n.category == Category::PipelineComm)
      key = n.name.find("send F") != std::string::npos ? fmt::format("s{} activation sends", n.stage)
            : fmt::format("s{} activation-gradient sends", n.stage);
    else if (n.category == Category::DataParallel) key = fmt::format("s{} DP all-reduce", n.stage);
    else if (n.category == Category::Embedding) key = "embedding all-reduce";
    else if (n.category == Category::Compress || n.category == Category::Decompress)
      key = fmt::format("s{} (de)compression", n.stage);
    else if (n.category == Category::TpGather) key = fmt::format("s{} TP all-gather", n.stage);
    else key = category_name(n.category);
    out[key] += std::min(join, n.end) - n.start;
  }
  return out;
}

}  // namespace

AutoResult auto_plan(const PlanConfig& base_in, const AutoLimits& lim, const Measured* measured) {
  PlanConfig base = base_in;
  base.cb = {};
  base.grad_comp = {};
  base.emb_comm_opt = false;
  AutoResult res;
  res.baseline = evaluate(base, measured);
  std::vector<Candidate> all;
  std::vector<CompressedBackpropConfig> cbs{{}};
  if (lim.allow_cb && base.pp > 1)
    for (int r : lim.cb_ranks)
      if (r >= lim.min_cb_rank)
        for (bool ec : {false, true}) cbs.push_back({true, r, true, ec});
  std::vector<GradCompressionConfig> dps{{}};
  if (lim.allow_dp && base.dp > 1)
    for (int r : lim.dp_ranks)
      if (r >= lim.min_dp_rank)
        for (int k = 1; k <= base.pp; ++k) dps.push_back({true, r, 0.0f, k == base.pp ? -1 : k, true});
  for (bool fe : {false, true})
    for (const auto& cb : cbs)
      for (const auto& dp : dps) {
        PlanConfig c = base;
        c.emb_comm_opt = fe, c.cb = cb, c.grad_comp = dp;
        Candidate cand = evaluate(c, measured);
        ++res.evaluated;
        if (cand.compressed_fraction <= lim.max_compressed_fraction + 1e-12) all.push_back(cand);
      }
  res.fastest = *std::min_element(all.begin(), all.end(),
                                  [](const Candidate& a, const Candidate& b) { return a.seconds < b.seconds; });
  // Least compression among the (nearly) fastest: less DP compression, fewer
  // compressed messages, higher ranks; lossless FE needs no preference.
  auto lossiness = [](const Candidate& c) {
    return std::make_tuple(c.compressed_fraction, c.cb_fraction, c.cfg.cb.enabled ? -c.cfg.cb.rank : 0,
                           c.cfg.grad_comp.enabled ? -c.cfg.grad_comp.rank : 0, c.seconds);
  };
  res.chosen = res.fastest;
  for (const Candidate& c : all)
    if (c.seconds <= res.fastest.seconds * (1 + lim.tolerance) && lossiness(c) < lossiness(res.chosen)) res.chosen = c;

  // Why: critical path of the baseline versus the chosen plan.
  const SimResult before = simulate(build_cost_model(res.baseline.cfg, measured).input);
  const SimResult after = simulate(build_cost_model(res.chosen.cfg, measured).input);
  auto b = critical_by_kind(before), a = critical_by_kind(after);
  std::vector<std::tuple<double, std::string>> changes;
  for (auto& [k, v] : b) changes.push_back({a[k] - v, k});
  for (auto& [k, v] : a)
    if (!b.count(k)) changes.push_back({v, k});
  std::sort(changes.begin(), changes.end());
  for (auto& [delta, k] : changes) {
    if (std::abs(delta) < 0.005 * before.iteration) continue;
    const double was = b.count(k) ? b[k] : 0.0, now = a.count(k) ? a[k] : 0.0;
    res.explanation.push_back(fmt::format("{:<34} {:>10.3f} ms -> {:>10.3f} ms on the critical path ({:+.3f} ms){}", k,
                                          was * 1e3, now * 1e3, delta * 1e3,
                                          now == 0 && was > 0 ? "  [taken off]" : ""));
  }
  return res;
}

}  // namespace occ::plan
