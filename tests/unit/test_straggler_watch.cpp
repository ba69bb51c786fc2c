#include "train/straggler_watch.h"

#include <gtest/gtest.h>

namespace occ {
namespace {

// The "ranks" array of one iteration: 4 ranks, P2 D2 (ranks 0, 1 on stage 0; 2, 3 on stage 1).
nlohmann::json ranks(const std::vector<double>& forward_ms) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t r = 0; r < forward_ms.size(); ++r)
    out.push_back({{"rank", int(r)}, {"tp", 0}, {"pp", int(r) / 2}, {"dp", int(r) % 2},
                   {"timers", {{"forward", forward_ms[r]}, {"backward", 2 * forward_ms[r]}, {"optimizer", 1.0},
                               {"pp_wait", 50.0}}}});
  return out;
}

TEST(StragglerWatch, NamesARankConsistentlySlowerThanItsStage) {
  StragglerWatch watch(10, 0.25);
  std::vector<std::string> warnings;
  for (int it = 0; it < 30; ++it) {
    // Stage 1 does more work than stage 0 (not a straggler); rank 3 is 40 % slower than rank 2
    // from iteration 10 on, with noise that sometimes reverses one iteration.
    const double slow = it >= 10 ? (it % 7 == 0 ? 0.9 : 1.4) : 1.0;
    nlohmann::json row;
    const std::string w = watch.observe(ranks({10, 10.5, 20, 20 * slow}), row);
    if (!w.empty()) warnings.push_back(w);
    EXPECT_TRUE(row.contains("compute_ms"));
    if (it == 29) {
      EXPECT_EQ(row["compute_ms"]["slowest_rank"], 3);
      EXPECT_EQ(row["straggler"]["rank"], 3);
    }
  }
  ASSERT_EQ(warnings.size(), 1u);  // said once (the noisy iterations do not make it say it again)
  EXPECT_NE(warnings[0].find("warning: rank 3 (pipeline stage 1) computed"), std::string::npos) << warnings[0];
}

TEST(StragglerWatch, QuietForEvenRanksAndOccasionalSpikes) {
  StragglerWatch watch(10, 0.25);
  for (int it = 0; it < 40; ++it) {
    nlohmann::json row;
    // One spike of 10x on rank 1 every 8 iterations: its total is high, but it is not slower most of the time.
    const double spike = it % 8 == 0 ? 10.0 : 1.0;
    EXPECT_EQ(watch.observe(ranks({10, 10 * spike, 20, 20}), row), "") << it;
    EXPECT_FALSE(row.contains("straggler")) << it;
  }
  nlohmann::json row;
  EXPECT_EQ(StragglerWatch().observe(ranks({10}), row), "");  // one rank: nothing to compare
}

}  // namespace
}  // namespace occ
