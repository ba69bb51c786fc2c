#include "apps/commands/plan_objective.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "apps/commands/train_flags.h"
#include "core/error.h"

namespace occ::cmd {

using namespace occ::plan;

const char* objective_name(PlanObjective o) {
  switch (o) {
    case PlanObjective::Time: return "time";
    case PlanObjective::LossBudget: return "loss-budget";
    case PlanObjective::TimeToTarget: return "time-to-target";
  }
  return "?";
}

void add_objective_flags(CLI::App& app, ObjectiveFlags& f) {
  app.add_option("--objective", f.objective,
                 "--auto: what the plan minimises: time (iteration time, least compression among the fastest), "
                 "loss-budget (the fastest within --max-loss-increase), time-to-target (predicted iteration time x the "
                 "iterations the race measured to reach the target loss; the default where a time-to-target.json "
                 "is found beside --compressors-json and its regime is known)");
  app.add_option("--time-to-target-json", f.time_to_target_json,
                 "--objective time-to-target: the race's measured iterations to target (python3 -m occtools race; "
                 "default: time-to-target.json beside --compressors-json)");
  app.add_option("--regime", f.regime,
                 "--objective time-to-target: which regime of the time-to-target.json (needed when it holds several)");
}

std::string time_to_target_path(const ObjectiveFlags& f, const std::string& compressors_json) {
  if (!f.time_to_target_json.empty()) return f.time_to_target_json;
  const std::filesystem::path dir = std::filesystem::path(compressors_json).parent_path();
  return (dir / "time-to-target.json").string();
}

namespace {

// A variant's compression flags, parsed the way train parses its own.
PlanCompression parse_variant(const TargetVariant& v, const TrainOptions& opt, const std::string& path,
                              const std::string& regime) {
  CLI::App app{"time-to-target variant flags", "plan"};
  TrainOptions o = opt;
  o.cb = {}, o.grad_comp = {}, o.activation_comp = {}, o.emb_comm_opt = false, o.diloco = {};
  add_train_flags(app, o);
  std::vector<std::string> args(v.train_flags.rbegin(), v.train_flags.rend());  // CLI11 takes them reversed
  auto bad = [&](const std::string& why) {
    return UsageError(fmt::format("--time-to-target-json {}: regime {} variant {} has train_flags that do not parse "
                                  "({}); regenerate it with python3 -m occtools race",
                                  path, regime, v.name, why));
  };
  try {
    app.parse(args);
    refuse_inapplicable_flags(app, o);
  } catch (const CLI::ParseError& e) {
    throw bad(e.what());
  } catch (const UsageError& e) {
    throw bad(e.what());
  }
  PlanCompression c;
  c.activation = o.activation_comp, c.cb = o.cb, c.grad = o.grad_comp, c.emb_comm_opt = o.emb_comm_opt;
  o.resolve_error_feedback(c.grad);
  c.diloco = o.diloco;
  return c;
}

}  // namespace

ObjectiveChoice resolve_objective(const CLI::App& app, const ObjectiveFlags& f, bool auto_mode, bool budget_given,
                                  const std::string& compressors_json, const TrainOptions& opt,
                                  const PlanConfig& base) {
  ObjectiveChoice c;
  const bool objective_given = app.count("--objective") > 0, file_given = app.count("--time-to-target-json") > 0;
  const bool regime_given = app.count("--regime") > 0;
  if (objective_given && f.objective != "time" && f.objective != "loss-budget" && f.objective != "time-to-target")
    throw UsageError(fmt::format("--objective {} is not one of time, loss-budget, time-to-target; pass one of them",
                                 f.objective));
  if (!auto_mode && (objective_given || file_given || regime_given))
    throw UsageError(fmt::format("{} chooses among plans: it needs --auto",
                                 objective_given ? "--objective" : file_given ? "--time-to-target-json" : "--regime"));
  if (!auto_mode) return c;
  const std::string path = time_to_target_path(f, compressors_json);
  if (objective_given) {
    c.objective = f.objective == "time"          ? PlanObjective::Time
                  : f.objective == "loss-budget" ? PlanObjective::LossBudget
                                                 : PlanObjective::TimeToTarget;
    if (budget_given && c.objective != PlanObjective::LossBudget)
      throw UsageError(fmt::format("--max-loss-increase is the loss-budget objective's, not {}'s; drop it or pass "
                                   "--objective loss-budget",
                                   f.objective));
  } else if (budget_given) {
    c.objective = PlanObjective::LossBudget;
  } else {
    c.objective = (file_given || regime_given || std::ifstream(path).good()) ? PlanObjective::TimeToTarget
                                                                             : PlanObjective::Time;
  }
  if (c.objective != PlanObjective::TimeToTarget) {
    if (file_given || regime_given)
      throw UsageError(fmt::format("{} belongs to --objective time-to-target, not {}; drop it or change --objective",
                                   file_given ? "--time-to-target-json" : "--regime", objective_name(c.objective)));
    return c;
  }
  c.table = std::make_unique<TimeToTargetTable>(TimeToTargetTable::load(path));
  c.regime = c.table->select(f.regime);
  if (!c.regime) {
    if (objective_given)
      throw UsageError(fmt::format("--objective time-to-target: {} holds regimes {}; pass --regime NAME",
                                   path, c.table->names()));
    // The default, undecided: today's behaviour, said.
    c.note = fmt::format("objective: time (not time-to-target: {} holds regimes {}; pass --regime NAME to choose by "
                         "time to target)",
                         path, c.table->names());
    c.objective = PlanObjective::Time;
    c.table.reset();
    return c;
  }
  for (TargetRegime& r : c.table->regimes())
    if (&r == c.regime)
      for (TargetVariant& v : r.variants) v.set_compression(parse_variant(v, opt, path, r.name), base);
  return c;
}

void print_time_to_target(const ObjectiveChoice& c, const AutoResult& a, double tolerance) {
  const TargetRegime& r = *c.regime;
  std::printf("objective: time-to-target (regime %s of %s%s%s; target: the baseline's validation loss %.4f at "
              "iteration %g)\n",
              r.name.c_str(), c.table->path().c_str(), r.real_setting.empty() ? "" : ": ", r.real_setting.c_str(),
              r.target_loss, r.baseline_iteration);
  std::printf("auto (time to target): %d plans from the regime's %zu measured variants (with the EC / SC / FE plans "
              "they cover); %d reached the target on every seed\n",
              a.evaluated, r.variants.size(), a.within_budget);
  std::printf("candidates (predicted ms/iteration x median iterations to target = predicted time to target):\n");
  const size_t shown = std::min<size_t>(a.considered.size(), 12);
  for (size_t i = 0; i < shown; ++i) {
    const Candidate& k = a.considered[i];
    if (k.iterations.known && k.iterations.reached)
      std::printf("  %10.3f ms x %8.1f = %10.3f s  %s [%s]\n", k.seconds * 1e3, k.iterations.iterations,
                  k.time_to_target(), compression_summary(k.cfg).c_str(), k.iterations.how.c_str());
    else
      std::printf("  %10.3f ms, not eligible: %s  %s\n", k.seconds * 1e3,
                  k.iterations.known ? "did not reach the target" : "no measured iterations",
                  compression_summary(k.cfg).c_str());
  }
  if (a.considered.size() > shown) std::printf("  ... %zu more\n", a.considered.size() - shown);
  const bool base_known = a.baseline.iterations.known && a.baseline.iterations.reached;
  if (a.none_eligible) {
    std::printf("chosen: none of the measured plans reached the target; the baseline (no compression) is shown\n");
  } else {
    std::printf("chosen: %.3f s predicted to target (%.3f ms x %.1f iterations)%s: %s (the fewest iterations within "
                "%.1f %% of the fastest to target)\n",
                a.chosen.time_to_target(), a.chosen.seconds * 1e3, a.chosen.iterations.iterations,
                base_known ? fmt::format(", {:.3f}x over the baseline's {:.3f} s", a.baseline.time_to_target() /
                                                                                        a.chosen.time_to_target(),
                                         a.baseline.time_to_target())
                                 .c_str()
                           : "",
                compression_summary(a.chosen.cfg).c_str(), tolerance * 100);
    std::printf("iterations to target: %s\n", a.chosen.iterations.how.c_str());
  }
  std::printf("train flags: %s\n", compression_flags(a.chosen.cfg).c_str());
  std::printf("why (critical path, baseline -> chosen):\n");
  for (const auto& line : a.explanation) std::printf("  %s\n", line.c_str());
}

}  // namespace occ::cmd
