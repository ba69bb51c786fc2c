// The planner's DiLoCo costs (plan/diloco_cost.h): its bytes against the
// engine's rule (one fp32 ring all-reduce of the parameters per H steps), the
// overlap, and that the simulated inner step has no DP traffic.
#include <gtest/gtest.h>

#include "plan/model_cost.h"
#include "plan/schedule_sim.h"

using namespace occ::plan;

namespace {
PlanConfig small(int H) {
  PlanConfig c;
  c.model.num_layers = 4, c.model.hidden_size = 128, c.model.num_attention_heads = 4;
  c.model.seq_length = c.model.max_position_embeddings = 128, c.model.vocab_size = 4096;
  c.micro_batch_size = 4, c.global_batch_size = 32;
  c.tp = 1, c.pp = 2, c.dp = 2;
  c.cluster.nodes = 4, c.cluster.devices_per_node = 1;
  c.cluster.inter = {37.5e6, 100e-6};  // 300 Mbit/s
  c.diloco.inner_steps = H;
  return c;
}
}  // namespace

TEST(PlanDiloco, BytesAreOneParameterAllReducePerRound) {
  // Per-step DP at D2 sends each stage's parameters once per iteration (3,748,864 and
  // 3,684,352 bytes: plan_model_cost_test); DiLoCo the same once per H iterations.
  const CostModel m = build_cost_model(small(8));
  EXPECT_DOUBLE_EQ(m.facts[0].dp_bytes, 3748864.0 / 8);
  EXPECT_DOUBLE_EQ(m.facts[1].dp_bytes, 3684352.0 / 8);
  for (const auto& st : m.input.stages) EXPECT_TRUE(st.buckets.empty());  // no per-step all-reduce
  EXPECT_DOUBLE_EQ(m.facts[0].outer_state_bytes, 8.0 * 3748864.0 / 4);  // theta and v per parameter
  // Fragments split the bytes, not add to them.
  PlanConfig f = small(8);
  f.diloco.fragments = 2;
  const CostModel mf = build_cost_model(f);
  EXPECT_DOUBLE_EQ(mf.facts[0].dp_bytes, 3748864.0 / 8);
  ASSERT_EQ(mf.diloco.stages[0].size(), 2u);
  EXPECT_GT(mf.diloco.stages[0][0].elements, mf.diloco.stages[0][1].elements);  // the embedding is in fragment 0
}

TEST(PlanDiloco, InnerStepIsFasterAndTheRoundCostIsAmortized) {
  PlanConfig base = small(8);
  base.diloco = {};
  const CostModel mb = build_cost_model(base), md = build_cost_model(small(8));
  const double tb = simulate(mb.input).iteration, ti = simulate(md.input).iteration;
  EXPECT_LT(ti, tb);  // the baseline's DP all-reduce is exposed on a 300 Mbit/s link
  const double round = md.diloco.per_round(ti);
  EXPECT_GT(round, 0.0);
  EXPECT_DOUBLE_EQ(mean_iteration_seconds(md, ti), ti + round / 8);
  // H 1 syncs every step: slower than H 8 on average.
  const CostModel m1 = build_cost_model(small(1));
  EXPECT_GT(mean_iteration_seconds(m1, simulate(m1.input).iteration), mean_iteration_seconds(md, ti));
}

TEST(PlanDiloco, OverlapHidesTheCollectiveNotTheMainThreadWork) {
  PlanConfig o = small(8);
  o.diloco.overlap_steps = 7;
  const CostModel m = build_cost_model(o), m0 = build_cost_model(small(8));
  const double ti = simulate(m.input).iteration;
  double main = 0;
  for (size_t f = 0; f < m.diloco.stages[0].size(); ++f) {
    double worst = 0;
    for (const auto& st : m.diloco.stages) worst = std::max(worst, st[f].main_seconds);
    main += worst;
  }
  EXPECT_LT(m.diloco.per_round(ti), m0.diloco.per_round(ti));
  EXPECT_GE(m.diloco.per_round(ti), main);
  // 7 inner steps are far longer than one all-reduce here: only the main thread's part is left.
  EXPECT_NEAR(m.diloco.per_round(ti), main, 1e-12);
}

TEST(PlanDiloco, CompressedOuterGradientsSendTheWire) {
  PlanConfig c = small(8);
  c.diloco.outer_comp = occ::CompressionMethod::Int8;
  const CostModel m = build_cost_model(c);
  // int8: one byte per value plus a 4-byte scale per row, all-gathered: (D - 1) x wire per rank.
  EXPECT_LT(m.facts[0].dp_bytes, 3748864.0 / 8 / 3.5);
  EXPECT_GT(m.facts[0].dp_bytes, 3748864.0 / 8 / 4.5);
}

TEST(PlanDiloco, ValidateRefusesWhatTrainRefuses) {
  PlanConfig c = small(8);
  c.emb_comm_opt = true;
  EXPECT_THROW(c.validate(), occ::UsageError);
}
