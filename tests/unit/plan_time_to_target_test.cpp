// The time-to-target objective (plan/time_to_target.h): the file's schema and
// its errors, which measured variant stands for a plan (exact, covering,
// unknown; "not reached" seeds), and the choice by predicted time to target.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "plan/auto_plan.h"
#include "plan/time_to_target.h"
#include "temp_dir.h"

using namespace occ::plan;

namespace {

std::string write(const occ::test::TempDir& dir, const std::string& text) {
  const std::string path = dir / "ttt.json";
  std::ofstream(path) << text;
  return path;
}

const char* kGood = R"({"schema": "occ-time-to-target/1", "regimes": [
  {"name": "r1", "real_setting": "x", "target": {"baseline_iteration": 100, "loss": 5.0}, "variants": [
    {"name": "baseline", "train_flags": [], "iterations_to_target": [100, 98, 102], "extra": 1},
    {"name": "dp", "train_flags": ["--grad-comp"], "iterations_to_target": [120, null, 110]}]},
  {"name": "r2", "target": {"baseline_iteration": 50, "loss": 4.0}, "variants": [
    {"name": "baseline", "train_flags": [], "iterations_to_target": [50]}]}]})";

// The message of the UsageError `f` throws ("" when none).
template <class F>
std::string usage_error(F f) {
  try {
    f();
  } catch (const occ::UsageError& e) {
    return e.what();
  }
  return "";
}

PlanConfig layout() {
  PlanConfig c;
  c.tp = 1, c.pp = 4, c.dp = 2;
  return c;
}

PlanCompression dp_powersgd(int rank, int selective_way = -1) {
  PlanCompression p;
  p.grad.enabled = true, p.grad.rank = rank, p.grad.error_feedback = true, p.grad.selective_way = selective_way;
  return p;
}

PlanCompression cb_powersgd(bool ec) {
  PlanCompression p;
  p.cb.enabled = true, p.cb.rank = 16, p.cb.lazy_error = true, p.cb.epilogue_only = ec;
  return p;
}

TargetVariant variant(const std::string& name, const PlanCompression& c, std::vector<std::optional<double>> its) {
  TargetVariant v;
  v.name = name;
  v.iterations = std::move(its);
  v.set_compression(c, layout());
  return v;
}

}  // namespace

TEST(PlanTimeToTarget, LoadsRegimesTargetsAndSeeds) {
  occ::test::TempDir dir("ttt");
  const TimeToTargetTable t = TimeToTargetTable::load(write(dir, kGood));
  ASSERT_EQ(t.regimes().size(), 2u);
  EXPECT_EQ(t.names(), "r1, r2");
  const TargetRegime& r = t.regimes()[0];
  EXPECT_EQ(r.real_setting, "x");
  EXPECT_EQ(r.baseline_iteration, 100);
  EXPECT_EQ(r.target_loss, 5.0);
  ASSERT_EQ(r.variants.size(), 2u);
  EXPECT_EQ(r.variants[1].train_flags, std::vector<std::string>{"--grad-comp"});
  EXPECT_TRUE(r.variants[0].reached());
  EXPECT_EQ(r.variants[0].median_iterations(), 100);
  EXPECT_FALSE(r.variants[1].reached());  // a null seed: not reached
  // Selecting: by name; without one only when the file holds one regime.
  EXPECT_EQ(t.select("r2")->target_loss, 4.0);
  EXPECT_EQ(t.select(""), nullptr);
  EXPECT_NE(usage_error([&] { t.select("nope"); }).find("--regime nope: "), std::string::npos);
  EXPECT_NE(usage_error([&] { t.select("nope"); }).find("pass one of: r1, r2"), std::string::npos);
}

TEST(PlanTimeToTarget, IllFormedFilesAreOneLineErrorsNamingTheFix) {
  occ::test::TempDir dir("ttt");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{not json", "(not JSON)"},
      {R"({"schema": "occ-time-to-target/2", "regimes": []})", "'schema' is \"occ-time-to-target/2\""},
      {R"({"schema": "occ-time-to-target/1"})", "the file has no 'regimes'"},
      {R"({"schema": "occ-time-to-target/1", "regimes": [{"name": "a", "variants": []}]})", "regime a has no 'target'"},
      {R"({"schema": "occ-time-to-target/1", "regimes": [{"name": "a", "target": {"baseline_iteration": 10,
          "loss": 1}, "variants": [{"name": "v", "train_flags": [], "iterations_to_target": ["7"]}]}]})",
       "regime a variant v's iterations_to_target entry is not a finite number"},
      {R"({"schema": "occ-time-to-target/1", "regimes": [{"name": "a", "target": {"baseline_iteration": 10,
          "loss": 1}, "variants": [{"name": "v", "train_flags": [3], "iterations_to_target": [7]}]}]})",
       "'train_flags' is not a list of strings"},
      {R"({"schema": "occ-time-to-target/1", "regimes": [{"name": "a", "target": {"baseline_iteration": 10,
          "loss": 1}, "variants": [{"name": "v", "train_flags": [], "iterations_to_target": [0]}]}]})",
       "has a value <= 0"},
  };
  for (const auto& [text_, what] : cases) {
    const std::string& text = text_;  // (a lambda cannot capture a structured binding before clang 16)
    const std::string msg = usage_error([&] { TimeToTargetTable::load(write(dir, text)); });
    EXPECT_NE(msg.find("is not a time-to-target.json of schema occ-time-to-target/1 ("), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
    EXPECT_NE(msg.find("regenerate it with python3 -m occtools race"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  const std::string missing = usage_error([&] { TimeToTargetTable::load(dir / "none.json"); });
  EXPECT_NE(missing.find("cannot open --time-to-target-json"), std::string::npos) << missing;
}

TEST(PlanTimeToTarget, AVariantStandsForThePlansItsMeasurementCovers) {
  TargetRegime r;
  r.name = "r";
  r.variants = {variant("baseline", {}, {100, 100}), variant("dp16", dp_powersgd(16), {120, 130}),
                variant("cb", cb_powersgd(false), {105, std::nullopt})};
  const PlanConfig base = layout();
  auto estimate = [&](const PlanCompression& c) { return iterations_to_target(r, LossCostTable::settings_of(c.applied_to(base))); };
  IterationsEstimate e = estimate({});
  EXPECT_TRUE(e.known && e.reached);
  EXPECT_EQ(e.iterations, 100);
  e = estimate(dp_powersgd(16));
  EXPECT_TRUE(e.known && e.reached);
  EXPECT_EQ(e.iterations, 125);  // the median of the seeds
  EXPECT_NE(e.how.find("measured as variant dp16"), std::string::npos);
  // SC compresses a subset of what the measurement compressed: bounded by it.
  e = estimate(dp_powersgd(16, 2));
  EXPECT_TRUE(e.known && e.reached);
  EXPECT_NE(e.how.find("bounded by"), std::string::npos);
  // Another rank was never measured: unknown, not eligible.
  EXPECT_FALSE(estimate(dp_powersgd(32)).known);
  // FE is lossless: the baseline's measurement stands for it.
  PlanCompression fe;
  fe.emb_comm_opt = true;
  EXPECT_EQ(estimate(fe).iterations, 100);
  // A seed that did not reach the target: known, not reached (also for EC, which it covers).
  e = estimate(cb_powersgd(true));
  EXPECT_TRUE(e.known);
  EXPECT_FALSE(e.reached);
  EXPECT_NE(e.how.find("not reached on every seed"), std::string::npos);
  // CB + DP together was never measured as a combination: unknown (iterations do not add).
  PlanCompression both = cb_powersgd(false);
  both.grad = dp_powersgd(16).grad;
  EXPECT_FALSE(estimate(both).known);
}

TEST(PlanTimeToTarget, FewerSecondsToTargetWinsNotFewerSecondsPerIteration) {
  auto cand = [](double seconds, double iterations, bool known = true, bool reached = true) {
    TargetCandidate c;
    c.seconds_per_iteration = seconds, c.iterations.known = known, c.iterations.reached = reached;
    c.iterations.iterations = iterations;
    return c;
  };
  // The baseline 1 s x 100; 2x faster per iteration needing 3x the iterations (150 s); 1.3x
  // faster needing 1.1x (84.6 s); the fastest per iteration but not reached; one unknown.
  const std::vector<TargetCandidate> c = {cand(1.0, 100), cand(0.5, 300), cand(1.0 / 1.3, 110),
                                          cand(0.1, 0, true, false), cand(0.2, 0, false, false)};
  EXPECT_EQ(choose_by_time_to_target(c, 0.0), 2);
  EXPECT_EQ(choose_by_time_to_target(c, 0.01), 2);
  // Within the tolerance of the fastest to target, the fewest iterations (the least lossy).
  const std::vector<TargetCandidate> close = {cand(0.85, 100), cand(1.0 / 1.3, 110)};
  EXPECT_EQ(choose_by_time_to_target(close, 0.0), 1);
  EXPECT_EQ(choose_by_time_to_target(close, 0.01), 0);
  // None eligible.
  EXPECT_EQ(choose_by_time_to_target({cand(0.1, 0, true, false)}, 0.01), -1);
}

TEST(PlanTimeToTarget, AutoPlanPicksByPredictedTimeToTarget) {
  // A DP-bound job (slow links, P2 D2): DP PowerSGD is much faster per iteration.
  PlanConfig base;
  base.model.num_layers = 4, base.model.hidden_size = 256, base.model.num_attention_heads = 8;
  base.model.seq_length = base.model.max_position_embeddings = 128, base.model.vocab_size = 1024;
  base.micro_batch_size = 4, base.global_batch_size = 32;
  base.tp = 1, base.pp = 2, base.dp = 2;
  base.cluster.nodes = 4, base.cluster.devices_per_node = 1;
  base.cluster.inter = {0.0375e9, 50e-6};
  TargetRegime r;
  r.name = "r";
  auto add = [&](const std::string& name, const PlanCompression& c, double its) {
    TargetVariant v;
    v.name = name, v.iterations = {its};
    v.set_compression(c, base);
    r.variants.push_back(v);
  };
  add("baseline", {}, 100);
  add("dp16", dp_powersgd(16), 1000);  // far too many iterations: loses
  AutoLimits lim;
  lim.target = &r;
  AutoResult a = auto_plan(base, lim, nullptr);
  EXPECT_FALSE(a.chosen.cfg.grad_comp.enabled);
  EXPECT_EQ(a.chosen.iterations.iterations, 100);
  r.variants.back().iterations = {110};  // now a little more than the baseline's: it wins
  a = auto_plan(base, lim, nullptr);
  EXPECT_TRUE(a.chosen.cfg.grad_comp.enabled);
  EXPECT_LT(a.chosen.time_to_target(), a.baseline.time_to_target());
  for (const Candidate& c : a.considered)
    if (c.iterations.known && c.iterations.reached) {
      EXPECT_GE(c.time_to_target(), a.chosen.time_to_target() - 1e-12);
    }
}
