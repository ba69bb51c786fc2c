// Calibration recovers known compute times and link parameters from metrics
// rows written the way train --metrics writes them.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "plan/auto_plan.h"
#include "plan/calibrate.h"
#include "temp_dir.h"

using namespace occ::plan;

namespace {

PlanConfig small() {
  PlanConfig c;
  c.model.num_layers = 4, c.model.hidden_size = 128, c.model.num_attention_heads = 4;
  c.model.seq_length = c.model.max_position_embeddings = 128, c.model.vocab_size = 4096;
  c.micro_batch_size = 4, c.global_batch_size = 32;
  c.tp = 1, c.pp = 2, c.dp = 2;
  c.cluster.nodes = 4, c.cluster.devices_per_node = 1;
  return c;
}

// Rows of a T1 P2 D2 run: stage s forward fwd[s] ms and backward bwd[s] ms per
// micro-batch; the DP reducer busy for steps * lat + bytes / bw on one rank of
// each stage and longer (waiting) on the other.
// norm_ms >= 0: the grad-norm all-reduce timer (ms) of the least-waiting rank.
void write_rows(const std::string& path, const PlanConfig& c, double lat, double bw, double norm_ms = -1) {
  const CostModel m = build_cost_model(c);
  const double fwd[2] = {2.0, 3.0}, bwd[2] = {4.0, 6.5};
  std::ofstream f(path);
  for (int it = 1; it <= 6; ++it) {
    nlohmann::json ranks = nlohmann::json::array();
    for (int r = 0; r < 4; ++r) {
      const int s = r / 2, d = r % 2;
      const auto& st = m.input.stages[size_t(s)];
      double bytes = 0;
      for (const auto& b : st.buckets) bytes += b.bytes;  // ring factor 2(D-1)/D = 1
      const double busy = double(st.buckets.size()) * 2 * lat + bytes / bw;
      nlohmann::json t = {{"forward", fwd[s] * 4}, {"backward", bwd[s] * 4}, {"data", 0.0},
                          {"dp_busy", (busy * 1e3) * (d == 0 ? 1.0 : 3.0)}, {"tp_allreduce", 0.0},
                          {"optimizer", 1.0 + d}};
      if (norm_ms >= 0) t["norm_allreduce"] = norm_ms * (r == 0 ? 1.0 : 4.0);
      ranks.push_back({{"rank", r}, {"tp", 0}, {"pp", s}, {"dp", d}, {"timers", t},
                       {"bytes", {{"dp", uint64_t(bytes)}}}});
    }
    f << nlohmann::json{{"iter", it}, {"ms", 100.0 + it}, {"ranks", ranks}}.dump() << "\n";
  }
}

}  // namespace

TEST(PlanCalibrate, RecoversStageTimesAndLink) {
  occ::test::TempDir dir("plan");
  const PlanConfig c = small();
  write_rows(dir / "m.jsonl", c, 40e-6, 2e9);
  const Calibration cal = calibrate(dir / "m.jsonl", c, false, false);
  EXPECT_EQ(cal.pp, 2);
  EXPECT_EQ(cal.dp, 2);
  EXPECT_EQ(cal.rows_used, 5);  // the first iteration is warm-up
  EXPECT_DOUBLE_EQ(cal.measured_ms, 104.0);
  EXPECT_NEAR(cal.measured.stages[0].forward, 2e-3, 1e-12);
  EXPECT_NEAR(cal.measured.stages[1].backward, 6.5e-3, 1e-12);
  EXPECT_NEAR(cal.inter.latency, 40e-6, 1e-9);
  EXPECT_NEAR(cal.inter.bandwidth, 2e9, 1e3);
  EXPECT_NE(cal.inter_source.find("fitted"), std::string::npos);
  // The least-waiting rank's optimizer time, per element, scaled per stage.
  const CostModel m = build_cost_model(c);
  const double per = std::min(1e-3 / double(m.facts[0].params), 1e-3 / double(m.facts[1].params));
  EXPECT_NEAR(cal.measured.stages[1].optimizer, per * double(m.facts[1].params), 1e-12);
}

TEST(PlanCalibrate, FitsMainThreadMessageLatencyApartFromTheReducer) {
  occ::test::TempDir dir("plan");
  PlanConfig c = small();
  // Grad-norm all-reduce over the model group (2 ranks: 2 ring steps) of 0.02 ms.
  write_rows(dir / "m.jsonl", c, 40e-6, 2e9, 0.02);
  const Calibration cal = calibrate(dir / "m.jsonl", c, false, false);
  EXPECT_NEAR(cal.inter.latency, 40e-6, 1e-9);  // the reducer's per-step cost, unchanged
  EXPECT_NEAR(cal.inter.p2p_latency, 10e-6, 1e-9);
  EXPECT_NEAR(cal.inter.message_latency(), 10e-6, 1e-9);
  // Never above the reducer's per-step cost.
  write_rows(dir / "n.jsonl", c, 40e-6, 2e9, 1.0);
  EXPECT_NEAR(calibrate(dir / "n.jsonl", c, false, false).inter.p2p_latency, 40e-6, 1e-9);
  // Without the timer (or with the link from flags): one latency for all.
  EXPECT_LT(calibrate(dir / "m.jsonl", c, true, false).inter.p2p_latency, 0.0);
  write_rows(dir / "o.jsonl", c, 40e-6, 2e9);
  EXPECT_LT(calibrate(dir / "o.jsonl", c, false, false).inter.p2p_latency, 0.0);
}

TEST(PlanCalibrate, CalibratedTimesDriveTheSimulation) {
  occ::test::TempDir dir("plan");
  PlanConfig c = small();
  write_rows(dir / "m.jsonl", c, 40e-6, 2e9);
  const Calibration cal = calibrate(dir / "m.jsonl", c, false, false);
  c.cluster.free_comm = true;
  const CostModel m = build_cost_model(c, &cal.measured);
  EXPECT_NEAR(m.input.stages[0].forward, 2e-3, 1e-12);
  EXPECT_NEAR(m.input.stages[1].backward, 6.5e-3, 1e-12);
  // Free communication, P2 M4, the slower last stage never waits:
  // s0 F0, then s1 runs 4 x (3 + 6.5) ms, then s0's last backward.
  const SimResult r = simulate(m.input);
  const double opt = std::max(cal.measured.stages[0].optimizer, cal.measured.stages[1].optimizer);
  EXPECT_NEAR(r.iteration, 2e-3 + 4 * 9.5e-3 + 4e-3 + opt, 1e-9);
}

TEST(PlanCalibrate, BadFilesAreUsageErrors) {
  occ::test::TempDir dir("plan");
  EXPECT_THROW(calibrate(dir / "missing.jsonl", small(), false, false), occ::UsageError);
  std::ofstream(dir / "bad.jsonl") << "{\"iter\": 1, \"ms\": 3}\n";
  EXPECT_THROW(calibrate(dir / "bad.jsonl", small(), false, false), occ::UsageError);
}

// Each malformed row is refused with a one-line UsageError naming its line and
// defect (found by fuzz/metrics_jsonl.cpp: before, a missing or mistyped field
// escaped as a JSON library exception, or an incomplete layout divided by 0).
TEST(PlanCalibrate, MalformedRowsNameTheLineAndDefect) {
  occ::test::TempDir dir("plan");
  auto rank = [](int pp, int dp) {
    return nlohmann::json{{"tp", 0}, {"pp", pp}, {"dp", dp}, {"timers", {{"forward", 1.0}, {"backward", 2.0}}}};
  };
  auto row = [&](nlohmann::json ranks) { return nlohmann::json{{"iter", 2}, {"ms", 10.0}, {"ranks", ranks}}; };
  const nlohmann::json whole = {rank(0, 0), rank(0, 1), rank(1, 0), rank(1, 1)};
  auto expect_refused = [&](const std::string& line, const std::string& needle) {
    const std::string path = dir / "m.jsonl";
    std::ofstream(path) << row(whole).dump() << "\n" << line << "\n";
    try {
      calibrate(path, small(), false, false);
      ADD_FAILURE() << "accepted: " << line;
    } catch (const occ::UsageError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("line 2"), std::string::npos) << message;
      EXPECT_NE(message.find(needle), std::string::npos) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  };
  nlohmann::json no_pp = whole;
  no_pp[1].erase("pp");
  expect_refused(row(no_pp).dump(), "without a 'pp' index");
  nlohmann::json text_dp = whole;
  text_dp[2]["dp"] = "1";
  expect_refused(row(text_dp).dump(), "without a 'dp' index");
  expect_refused(row({rank(0, 0), rank(0, 0), rank(1, 0), rank(1, 1)}).dump(), "twice");
  expect_refused(row({rank(0, 0), rank(1, 1)}).dump(), "not the 1 x 2 x 2");
  nlohmann::json bad_timer = whole;
  bad_timer[0]["timers"]["forward"] = "fast";
  expect_refused(row(bad_timer).dump(), "timer");
  nlohmann::json negative_ms = row(whole);
  negative_ms["ms"] = -1;
  expect_refused(negative_ms.dump(), "'ms'");
  expect_refused("[1, 2]", "no per-rank metrics");
  expect_refused("{\"ms\": 1, \"ranks\": [", "not JSON");
}

TEST(PlanAuto, RespectsLimitsAndNeverLosesToBaseline) {
  PlanConfig c;  // GPT-2.5B, T8 P4 D4 on 16 x 8 A100 (the defaults)
  c.model.num_layers = 52, c.model.hidden_size = 1920, c.model.num_attention_heads = 24;
  c.model.seq_length = c.model.max_position_embeddings = 1024, c.model.vocab_size = 50257;
  c.tp = 8, c.pp = 4, c.dp = 4, c.bytes_per_value = 2, c.recompute_activations = true;
  c.cluster.nodes = 16, c.cluster.devices_per_node = 8;
  AutoLimits lim;
  const AutoResult a = auto_plan(c, lim, nullptr);
  EXPECT_LE(a.chosen.seconds, a.baseline.seconds);
  EXPECT_LE(a.chosen.seconds, a.fastest.seconds * (1 + lim.tolerance));
  lim.max_compressed_fraction = 0.0;
  const AutoResult none = auto_plan(c, lim, nullptr);
  EXPECT_FALSE(none.chosen.cfg.grad_comp.enabled);
  lim.max_compressed_fraction = 1.0;
  lim.min_cb_rank = 32;
  const AutoResult high = auto_plan(c, lim, nullptr);
  EXPECT_TRUE(!high.chosen.cfg.cb.enabled || high.chosen.cfg.cb.rank >= 32);
}
