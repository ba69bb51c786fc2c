#include "plan/time_to_target.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace occ::plan {

PlanConfig PlanCompression::applied_to(const PlanConfig& base) const {
  PlanConfig c = base;
  c.activation_comp = activation, c.cb = cb, c.grad_comp = grad, c.emb_comm_opt = emb_comm_opt, c.diloco = diloco;
  return c;
}

void TargetVariant::set_compression(const PlanCompression& c, const PlanConfig& layout) {
  compression = c;
  links = LossCostTable::settings_of(c.applied_to(layout));
  links_set = true;
}

bool TargetVariant::reached() const {
  return !iterations.empty() && std::all_of(iterations.begin(), iterations.end(), [](const auto& i) { return i.has_value(); });
}

double TargetVariant::median_iterations() const {
  std::vector<double> v;
  for (const auto& i : iterations)
    if (i) v.push_back(*i);
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

namespace {

// A problem with the file's content: thrown inside load(), reworded there with the file's name.
struct BadContent {
  std::string what;
};

const nlohmann::json& field(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) throw BadContent{fmt::format("{} has no '{}'", where, key)};
  return j.at(key);
}

double finite_number(const nlohmann::json& j, const std::string& what) {
  if (!j.is_number() || !std::isfinite(j.get<double>())) throw BadContent{what + " is not a finite number"};
  return j.get<double>();
}

std::string text(const nlohmann::json& j, const std::string& what) {
  if (!j.is_string() || j.get<std::string>().empty()) throw BadContent{what + " is not a non-empty string"};
  return j.get<std::string>();
}

}  // namespace

TimeToTargetTable TimeToTargetTable::load(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw UsageError(fmt::format("cannot open --time-to-target-json {}; run python3 -m occtools race (it writes "
                                 "time-to-target.json) or pass its path",
                                 path));
  TimeToTargetTable t;
  t.path_ = path;
  auto bad = [&](const std::string& what) {
    return UsageError(fmt::format("--time-to-target-json {} is not a time-to-target.json of schema {} ({}); "
                                  "regenerate it with python3 -m occtools race",
                                  path, kTimeToTargetSchema, what));
  };
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw bad("not JSON");
  try {
    const nlohmann::json& schema = field(j, "schema", "the file");
    if (!schema.is_string() || schema.get<std::string>() != kTimeToTargetSchema)
      throw BadContent{fmt::format("'schema' is {}", schema.dump())};
    const nlohmann::json& regimes = field(j, "regimes", "the file");
    if (!regimes.is_array() || regimes.empty()) throw BadContent{"'regimes' is not a non-empty list"};
    for (size_t r = 0; r < regimes.size(); ++r) {
      const nlohmann::json& rj = regimes[r];
      const std::string where = fmt::format("regime {}", r);
      TargetRegime reg;
      reg.name = text(field(rj, "name", where), where + "'s 'name'");
      const std::string rw = "regime " + reg.name;
      if (std::any_of(t.regimes_.begin(), t.regimes_.end(), [&](const TargetRegime& o) { return o.name == reg.name; }))
        throw BadContent{fmt::format("two regimes are named '{}'", reg.name)};
      if (rj.contains("real_setting") && rj.at("real_setting").is_string())
        reg.real_setting = rj.at("real_setting").get<std::string>();
      const nlohmann::json& target = field(rj, "target", rw);
      reg.baseline_iteration = finite_number(field(target, "baseline_iteration", rw + "'s target"),
                                             rw + "'s target.baseline_iteration");
      reg.target_loss = finite_number(field(target, "loss", rw + "'s target"), rw + "'s target.loss");
      if (reg.baseline_iteration <= 0) throw BadContent{rw + "'s target.baseline_iteration is not > 0"};
      const nlohmann::json& variants = field(rj, "variants", rw);
      if (!variants.is_array() || variants.empty()) throw BadContent{rw + "'s 'variants' is not a non-empty list"};
      for (size_t v = 0; v < variants.size(); ++v) {
        const nlohmann::json& vj = variants[v];
        TargetVariant var;
        var.name = text(field(vj, "name", fmt::format("{} variant {}", rw, v)), fmt::format("{} variant {}'s 'name'", rw, v));
        const std::string vw = fmt::format("{} variant {}", rw, var.name);
        const nlohmann::json& flags = field(vj, "train_flags", vw);
        if (!flags.is_array()) throw BadContent{vw + "'s 'train_flags' is not a list of strings"};
        for (const auto& f : flags) {
          if (!f.is_string()) throw BadContent{vw + "'s 'train_flags' is not a list of strings"};
          var.train_flags.push_back(f.get<std::string>());
        }
        const nlohmann::json& its = field(vj, "iterations_to_target", vw);
        if (!its.is_array() || its.empty())
          throw BadContent{vw + "'s 'iterations_to_target' is not a non-empty list (one per seed)"};
        for (const auto& i : its) {
          if (i.is_null()) {
            var.iterations.push_back(std::nullopt);
            continue;
          }
          const double x = finite_number(i, vw + "'s iterations_to_target entry");
          if (x <= 0) throw BadContent{vw + "'s iterations_to_target has a value <= 0"};
          var.iterations.push_back(x);
        }
        reg.variants.push_back(std::move(var));
      }
      t.regimes_.push_back(std::move(reg));
    }
  } catch (const BadContent& e) {
    throw bad(e.what);
  }
  return t;
}

std::string TimeToTargetTable::names() const {
  std::string s;
  for (const TargetRegime& r : regimes_) s += (s.empty() ? "" : ", ") + r.name;
  return s;
}

const TargetRegime* TimeToTargetTable::select(const std::string& name) const {
  if (name.empty()) return regimes_.size() == 1 ? &regimes_.front() : nullptr;
  for (const TargetRegime& r : regimes_)
    if (r.name == name) return &r;
  throw UsageError(fmt::format("--regime {}: {} has no such regime; pass one of: {}", name, path_, names()));
}

IterationsEstimate iterations_to_target(const TargetRegime& regime,
                                        const std::array<std::optional<LinkSetting>, 3>& want) {
  const TargetVariant* exact = nullptr;
  const TargetVariant* bound = nullptr;
  for (const TargetVariant& v : regime.variants) {
    OCC_CHECK(v.links_set, "internal: variant {}'s links were not set", v.name);
    bool same = true, covered = true;
    for (size_t c = 0; c < 3; ++c) {
      const bool has = v.links[c].has_value();
      same = same && has == want[c].has_value() && (!has || same_setting(*v.links[c], *want[c]));
      covered = covered && has == want[c].has_value() && (!has || covers(*v.links[c], *want[c]));
    }
    // Several candidates: the one that reached the target, then the fewest iterations.
    auto better = [](const TargetVariant* best, const TargetVariant& v) {
      return !best || std::make_tuple(!v.reached(), v.median_iterations()) <
                          std::make_tuple(!best->reached(), best->median_iterations());
    };
    if (same && better(exact, v)) exact = &v;
    if (!same && covered && better(bound, v)) bound = &v;
  }
  IterationsEstimate e;
  const TargetVariant* v = exact ? exact : bound;
  if (!v) {
    e.how = "no variant of regime " + regime.name + " measured this compression";
    return e;
  }
  e.known = true;
  e.reached = v->reached();
  e.iterations = e.reached ? v->median_iterations() : 0;
  std::string seeds;
  for (const auto& i : v->iterations) seeds += (seeds.empty() ? "" : ", ") + (i ? fmt::format("{:g}", *i) : "null");
  e.how = fmt::format("{} variant {} (iterations per seed: {})", exact ? "measured as" : "bounded by (compresses no less)",
                      v->name, seeds);
  if (!e.reached) e.how += "; not reached on every seed";
  return e;
}

int choose_by_time_to_target(const std::vector<TargetCandidate>& c, double tolerance) {
  int best = -1;
  for (size_t i = 0; i < c.size(); ++i)
    if (c[i].eligible() && (best < 0 || c[i].time_to_target() < c[size_t(best)].time_to_target())) best = int(i);
  if (best < 0) return -1;
  const double limit = c[size_t(best)].time_to_target() * (1 + tolerance);
  int chosen = best;
  for (size_t i = 0; i < c.size(); ++i) {
    if (!c[i].eligible() || c[i].time_to_target() > limit) continue;
    const auto key = [&](size_t k) { return std::make_tuple(c[k].iterations.iterations, c[k].time_to_target()); };
    if (key(i) < key(size_t(chosen))) chosen = int(i);
  }
  return chosen;
}

}  // namespace occ::plan
