#include "plan/auto_plan.h"

#include <algorithm>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "parallel/pipeline_schedule.h"

namespace occ::plan {

namespace {
// The flags that select `spec` on a link: --PREFIX-method (when not PowerSGD),
// the PowerSGD rank or the topk fraction.
std::string method_flags(const std::string& prefix, const CompressorSpec& spec) {
  if (spec.method == CompressionMethod::PowerSgd) return fmt::format(" --{}-rank {}", prefix, spec.rank);
  std::string f = fmt::format(" --{}-method {}", prefix, method_name(spec.method));
  if (spec.method == CompressionMethod::Topk) f += fmt::format(" --{}-topk-fraction {:g}", prefix, spec.topk_fraction);
  if (spec.method == CompressionMethod::Topk2) f += fmt::format(" --{}-topk-density {:g}", prefix, spec.topk_density);
  if (method_is_adaptive(spec.method))
    f += fmt::format(" --{}-adaptive-high-fraction {:g}", prefix, spec.high_fraction);
  if (method_takes_block_options(spec.method) && spec.stochastic) f += fmt::format(" --{}-rounding stochastic", prefix);
  if (method_takes_block_options(spec.method) && spec.rotation > 0)
    f += spec.rotation == kDefaultRotationBlock ? fmt::format(" --{}-rotation hadamard", prefix)
                                                : fmt::format(" --{}-rotation hadamard:{}", prefix, spec.rotation);
  return f;
}
}  // namespace

std::string compression_flags(const PlanConfig& c) {
  std::string f;
  if (c.activation_comp.enabled) {
    f += method_flags("activation-comp", c.activation_comp.spec());
    if (c.activation_comp.lossless != LosslessCoding::None)
      f += fmt::format(" --activation-comp-lossless {}", lossless_name(c.activation_comp.lossless));
  }
  if (c.cb.enabled) {
    f += " --inter-grad-comp" + method_flags("inter-grad-comp", c.cb.spec());
    if (c.cb.epilogue_only) f += " --inter-grad-comp-epilogue-only";
    if (c.cb.lossless != LosslessCoding::None) f += fmt::format(" --inter-grad-comp-lossless {}", lossless_name(c.cb.lossless));
  }
  // --use-error-feedback is LEP and DP error feedback at once (the prototype's
  // flag); DP error feedback alone has its own flag.
  const bool dp_ef = c.grad_comp.enabled && c.grad_comp.error_feedback;
  if (c.cb.enabled && c.cb.lazy_error) f += " --use-error-feedback";
  if (c.cb.enabled && c.cb.lazy_error && c.cb.lep_decay != 1.0f)
    f += fmt::format(" --inter-grad-comp-lep-decay {:g}", c.cb.lep_decay);
  if (c.emb_comm_opt) f += " --emb-comm-opt";
  if (c.grad_comp.enabled) {
    f += " --grad-comp" + method_flags("grad-comp", c.grad_comp.spec());
    if (dp_ef && !(c.cb.enabled && c.cb.lazy_error)) f += " --grad-comp-error-feedback";
    if (c.grad_comp.warmup_fraction > 0) f += fmt::format(" --grad-comp-warm-up {:g}", c.grad_comp.warmup_fraction);
    if (c.grad_comp.selective_way >= 1 && c.grad_comp.selective_way < c.pp)
      f += fmt::format(" --selective-grad-comp-way {}", c.grad_comp.selective_way);
  }
  if (c.diloco.enabled()) {
    const DilocoConfig& d = c.diloco;
    const DilocoConfig defaults;
    f += fmt::format(" --diloco-inner-steps {}", d.inner_steps);
    if (d.outer_lr != defaults.outer_lr) f += fmt::format(" --diloco-outer-lr {:g}", d.outer_lr);
    if (d.outer_momentum != defaults.outer_momentum) f += fmt::format(" --diloco-outer-momentum {:g}", d.outer_momentum);
    if (d.fragments > 1) f += fmt::format(" --diloco-fragments {}", d.fragments);
    if (d.overlap_steps > 0) f += fmt::format(" --diloco-overlap-steps {} --diloco-mixing {:g}", d.overlap_steps, d.mixing);
    if (d.outer_comp) {
      f += method_flags("diloco-outer-comp", d.outer_spec());
      if (d.outer_error_feedback) f += " --diloco-outer-comp-error-feedback";
    }
  }
  return f.empty() ? "(none)" : f.substr(1);
}

std::string compression_summary(const PlanConfig& c) {
  std::vector<std::string> parts;
  // The lossless stage's bytes depend on the data: the plan counts the codec's raw wire (an upper bound).
  const char* rans = " + rANS (its bytes modelled as the raw wire's: an upper bound)";
  if (c.activation_comp.enabled)
    parts.push_back("activations " + describe(c.activation_comp.spec()) +
                    (c.activation_comp.lossless != LosslessCoding::None ? rans : ""));
  if (c.cb.enabled)
    parts.push_back(fmt::format("CB {}{}{}{}", describe(c.cb.spec()), c.cb.lazy_error ? " + LEP" : "",
                                c.cb.epilogue_only ? " + EC" : "", c.cb.lossless != LosslessCoding::None ? rans : ""));
  if (c.emb_comm_opt) parts.push_back("FE");
  if (c.grad_comp.enabled)
    parts.push_back(fmt::format("DP {}{}{}", describe(c.grad_comp.spec()),
                                c.grad_comp.error_feedback && !(c.cb.enabled && c.cb.lazy_error) ? " + EF" : "",
                                c.grad_comp.selective_way >= 1 && c.grad_comp.selective_way < c.pp
                                    ? fmt::format(" on stages < {} (SC)", c.grad_comp.selective_way)
                                    : std::string(" on every stage")));
  if (c.diloco.enabled()) parts.push_back(c.diloco.describe());
  if (parts.empty()) return "none";
  std::string s = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) s += ", " + parts[i];
  return s;
}

namespace {

Candidate evaluate(const PlanConfig& cfg, const Measured* measured) {
  Candidate c;
  c.cfg = cfg;
  const CostModel m = build_cost_model(cfg, measured);
  c.seconds = mean_iteration_seconds(m, simulate(m.input).iteration);
  double all = 0, compressed = 0;
  for (const auto& f : m.facts) all += double(f.params), compressed += double(f.compressed_params);
  c.compressed_fraction = all > 0 ? compressed / all : 0;
  const int P = cfg.pp, M = cfg.micro_batches(), V = cfg.chunks();
  int sent = 0, comp = 0;
  for (int s = 0; s < P; ++s) {
    const auto late = backwards_after_last_forward(pipeline_program(P, V, s, M), V, M);
    for (int chunk = 0; chunk < V; ++chunk)
      for (int j = 0; j < M && chunk * P + s > 0; ++j)  // virtual stage 0 sends nothing backward
        sent += 1, comp += CompressedBackprop::compresses(cfg.cb, late[size_t(chunk)][size_t(j)]) ? 1 : 0;
  }
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

// Why: the critical path of the baseline versus the chosen plan.
void explain(AutoResult& res, const Measured* measured) {
  // Why: critical path of the baseline versus the chosen plan.
  const CostModel chosen = build_cost_model(res.chosen.cfg, measured);
  const SimResult before = simulate(build_cost_model(res.baseline.cfg, measured).input);
  const SimResult after = simulate(chosen.input);
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
  if (chosen.diloco.on)  // outside the simulated iteration: the outer syncs, once per round
    res.explanation.push_back(fmt::format("{:<34} {:>10.3f} ms -> {:>10.3f} ms per iteration, amortized ({:.3f} ms "
                                          "per round of {} inner steps)",
                                          "DiLoCo outer syncs", 0.0, chosen.diloco.amortized(after.iteration) * 1e3,
                                          chosen.diloco.per_round(after.iteration) * 1e3, chosen.diloco.inner_steps));
}

// A measured DiLoCo setting as the engine's configuration.
DilocoConfig diloco_of(const LinkSetting& s) {
  DilocoConfig d;
  d.inner_steps = s.inner_steps, d.fragments = s.fragments, d.overlap_steps = s.overlap;
  d.mixing = float(s.mixing), d.outer_lr = float(s.outer_lr), d.outer_momentum = float(s.outer_momentum);
  if (!s.outer_comp.empty()) d.outer_comp = parse_method(s.outer_comp, "diloco outer_comp", DilocoConfig::outer_methods());
  d.outer_stochastic = s.outer_stochastic;
  d.outer_rotation = s.outer_rotation;
  if (s.outer_fraction > 0 && d.outer_comp == CompressionMethod::Topk) d.outer_topk_fraction = s.outer_fraction;
  if (s.outer_fraction > 0 && d.outer_comp == CompressionMethod::Topk2) d.outer_topk_density = s.outer_fraction;
  d.outer_error_feedback = s.outer_error_feedback;
  return d;
}

// A link setting of the sweep as the engine's configuration.
CompressorSpec spec_of(const LinkSetting& s) {
  CompressorSpec spec;
  spec.method = parse_method(s.method, "compressors.json method", all_methods());
  if (s.rank > 0) spec.rank = s.rank;
  if (s.fraction > 0) (spec.method == CompressionMethod::Topk2 ? spec.topk_density : spec.topk_fraction) = s.fraction;
  spec.stochastic = s.stochastic;
  spec.rotation = s.rotation;
  spec.high_fraction = s.high_fraction;
  return spec;
}

LosslessCoding lossless_of(const LinkSetting& s) {
  return s.lossless == "rans" ? LosslessCoding::Rans : LosslessCoding::None;
}

// Quality-aware candidates: every combination of measured settings (and none)
// per link class (alone or in a measured combination), with EC / SC variants and FE.
std::vector<PlanConfig> measured_plans(const PlanConfig& base, const LossCostTable& t) {
  std::vector<ActivationCompressionConfig> fwds{{}};
  if (base.pp > 1)
    for (const LinkSetting& s : t.measured_settings(LinkClass::Forward)) {
      const CompressorSpec spec = spec_of(s);
      fwds.push_back({.enabled = true, .method = spec.method, .topk_fraction = spec.topk_fraction,
                      .stochastic = spec.stochastic, .rotation = spec.rotation, .high_fraction = spec.high_fraction,
                      .lossless = lossless_of(s)});
    }
  std::vector<CompressedBackpropConfig> bwds{{}};
  if (base.pp > 1)
    for (const LinkSetting& s : t.measured_settings(LinkClass::Backward)) {
      const CompressorSpec spec = spec_of(s);
      for (bool ec : {false, true}) {
        if (s.ec && !ec) continue;
        bwds.push_back({.enabled = true, .rank = spec.rank, .method = spec.method, .topk_fraction = spec.topk_fraction,
                        .stochastic = spec.stochastic, .rotation = spec.rotation, .high_fraction = spec.high_fraction,
                        .lazy_error = s.lep, .lep_decay = float(s.lep_decay), .epilogue_only = ec,
                        .lossless = lossless_of(s)});
      }
    }
  // The dp link: DP compression, or DiLoCo instead of per-step averaging.
  struct DpChoice {
    GradCompressionConfig grad;
    DilocoConfig diloco;
  };
  std::vector<DpChoice> dps{{}};
  if (base.dp > 1)
    for (const LinkSetting& s : t.measured_settings(LinkClass::DataParallel)) {
      if (s.diloco()) {
        dps.push_back({{}, diloco_of(s)});
        continue;
      }
      const CompressorSpec spec = spec_of(s);
      for (int k = 1; k <= base.pp; ++k) {
        if (s.sc > 0 && (k == base.pp || k > s.sc)) continue;
        dps.push_back({{.enabled = true, .rank = spec.rank, .warmup_fraction = float(s.warmup),
                        .selective_way = k == base.pp ? -1 : k, .error_feedback = s.error_feedback,
                        .method = spec.method, .topk_fraction = spec.topk_fraction, .topk_density = spec.topk_density,
                        .stochastic = spec.stochastic, .rotation = spec.rotation, .high_fraction = spec.high_fraction},
                       {}});
      }
    }
  std::vector<PlanConfig> plans;
  for (bool fe : {false, true})
    for (const auto& fwd : fwds)
      for (const auto& bwd : bwds)
        for (const auto& dp : dps) {
          // --use-error-feedback couples LEP and DP error feedback: LEP without
          // DP error feedback cannot be asked for.
          if (bwd.enabled && bwd.lazy_error && dp.grad.enabled && !dp.grad.error_feedback) continue;
          if (fe && dp.diloco.enabled()) continue;  // FE crosses the replicas every step: DiLoCo refuses it
          PlanConfig c = base;
          c.emb_comm_opt = fe, c.activation_comp = fwd, c.cb = bwd, c.grad_comp = dp.grad, c.diloco = dp.diloco;
          plans.push_back(c);
        }
  return plans;
}

// Time-to-target candidates: each measured variant on the plan's model and
// layout, plus the plans its measurement covers (EC on its CB, SC on its DP
// compression) and FE on or off (lossless), each once.
std::vector<PlanConfig> target_plans(const PlanConfig& base, const TargetRegime& regime) {
  std::vector<PlanConfig> plans;
  std::vector<std::string> seen;
  auto add = [&](const PlanConfig& c) {
    const std::string key = compression_flags(c);
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) return;
    seen.push_back(key);
    plans.push_back(c);
  };
  for (const TargetVariant& v : regime.variants) {
    const PlanConfig measured = v.compression.applied_to(base);
    std::vector<PlanConfig> ecs{measured};
    if (measured.cb.enabled && !measured.cb.epilogue_only && base.pp > 1) {
      PlanConfig c = measured;
      c.cb.epilogue_only = true;
      ecs.push_back(c);
    }
    for (const PlanConfig& e : ecs) {
      std::vector<PlanConfig> scs{e};
      const int k = e.grad_comp.selective_way;
      if (e.grad_comp.enabled && base.dp > 1 && !(k >= 1 && k < base.pp))
        for (int way = 1; way < base.pp; ++way) {
          PlanConfig c = e;
          c.grad_comp.selective_way = way;
          scs.push_back(c);
        }
      for (const PlanConfig& c : scs)
        for (bool fe : {false, true}) {
          if (fe && c.diloco.enabled()) continue;  // DiLoCo refuses FE
          PlanConfig f = c;
          f.emb_comm_opt = fe;
          add(f);
        }
    }
  }
  return plans;
}

}  // namespace

AutoResult auto_plan(const PlanConfig& base_in, const AutoLimits& lim, const Measured* measured) {
  PlanConfig base = base_in;
  base.cb = {};
  base.grad_comp = {};
  base.activation_comp = {};
  base.emb_comm_opt = false;
  base.diloco = {};
  AutoResult res;
  res.baseline = evaluate(base, measured);
  std::vector<Candidate> all;
  if (lim.target) {
    res.baseline.iterations = iterations_to_target(*lim.target, LossCostTable::settings_of(base));
    std::vector<TargetCandidate> scored;
    for (const PlanConfig& c : target_plans(base, *lim.target)) {
      ++res.evaluated;
      Candidate cand = evaluate(c, measured);
      cand.iterations = iterations_to_target(*lim.target, LossCostTable::settings_of(c));
      all.push_back(cand);
      scored.push_back({cand.seconds, cand.iterations});
    }
    const int chosen = choose_by_time_to_target(scored, lim.tolerance);
    for (const TargetCandidate& t : scored) res.within_budget += t.eligible() ? 1 : 0;
    res.none_eligible = chosen < 0;
    res.chosen = chosen < 0 ? res.baseline : all[size_t(chosen)];
    res.fastest = res.chosen;
    for (const Candidate& c : all)
      if (c.iterations.known && c.iterations.reached && c.time_to_target() < res.fastest.time_to_target()) res.fastest = c;
    res.considered = all;
    std::stable_sort(res.considered.begin(), res.considered.end(), [](const Candidate& a, const Candidate& b) {
      const bool ea = a.iterations.known && a.iterations.reached, eb = b.iterations.known && b.iterations.reached;
      if (ea != eb) return ea;
      return ea ? a.time_to_target() < b.time_to_target() : a.seconds < b.seconds;
    });
    explain(res, measured);
    return res;
  }
  if (lim.loss_costs) {
    res.baseline.loss = lim.loss_costs->estimate(base);
    for (const PlanConfig& c : measured_plans(base, *lim.loss_costs)) {
      ++res.evaluated;
      LossEstimate loss = lim.loss_costs->estimate(c);
      if (!loss.known || loss.pct > lim.max_loss_increase + 1e-12) continue;
      Candidate cand = evaluate(c, measured);
      cand.loss = loss;
      all.push_back(cand);
    }
    res.within_budget = int(all.size());
    res.fastest = *std::min_element(all.begin(), all.end(),
                                    [](const Candidate& a, const Candidate& b) { return a.seconds < b.seconds; });
    // Among the (nearly) fastest, the lowest expected loss cost, then the faster.
    res.chosen = res.fastest;
    for (const Candidate& c : all)
      if (c.seconds <= res.fastest.seconds * (1 + lim.tolerance) &&
          std::make_tuple(c.loss.pct, c.seconds) < std::make_tuple(res.chosen.loss.pct, res.chosen.seconds))
        res.chosen = c;
    explain(res, measured);
    return res;
  }
  std::vector<CompressedBackpropConfig> cbs{{}};
  if (lim.allow_cb && base.pp > 1)
    for (int r : lim.cb_ranks)
      if (r >= lim.min_cb_rank)
        for (bool ec : {false, true}) cbs.push_back({.enabled = true, .rank = r, .lazy_error = true, .epilogue_only = ec});
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

  explain(res, measured);
  return res;
}

}  // namespace occ::plan
