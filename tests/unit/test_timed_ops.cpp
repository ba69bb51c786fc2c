// kernels::TimedOps (bench --op-profile): a pass-through decorator. Results must
// be exactly those of the wrapped backend; each call is accounted under its op
// (linear layers per shape, with their matrix FLOPs); disabled, nothing is counted.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/ops.h"
#include "kernels/timed_ops.h"

namespace occ::kernels {
namespace {

std::vector<float> ramp(size_t n, float step) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(int(i % 13) - 6) * step;
  return v;
}

TEST(TimedOps, PassesThroughAndAccountsPerOpAndShape) {
  const int64_t N = 6, C = 5, OC = 7;
  const auto inp = ramp(size_t(N * C), 0.25f), w = ramp(size_t(OC * C), 0.125f), bias = ramp(size_t(OC), 0.5f);
  std::vector<float> direct(size_t(N * OC)), timed_out(size_t(N * OC));
  cpu_ops().linear_forward(direct.data(), inp.data(), w.data(), bias.data(), N, C, OC);

  TimedOps timed(cpu_ops());
  EXPECT_EQ(timed.device(), Device::Cpu);
  timed.linear_forward(timed_out.data(), inp.data(), w.data(), bias.data(), N, C, OC, Precision::Fp32);
  timed.linear_forward(timed_out.data(), inp.data(), w.data(), bias.data(), N, C, OC, Precision::Fp32);
  EXPECT_EQ(timed_out, direct);  // bit for bit: the decorator only times
  const double sq = timed.sum_squares(direct.data(), N * OC);
  EXPECT_EQ(sq, cpu_ops().sum_squares(direct.data(), N * OC));

  std::vector<float> dinp(size_t(N * C)), dw(size_t(OC * C));
  timed.linear_backward(dinp.data(), dw.data(), nullptr, direct.data(), inp.data(), w.data(), N, C, OC, false,
                        Precision::Fp32);

  const auto acc = timed.accounts();
  ASSERT_EQ(acc.size(), 3u);
  double seconds = 0;
  for (const auto& a : acc) {
    seconds += a.seconds;
    EXPECT_GE(a.seconds, 0.0);
    if (a.name == "linear_forward [6 x 5] -> 7") {
      EXPECT_EQ(a.calls, 2);
      EXPECT_EQ(a.flops, 2 * 2.0 * N * C * OC);
    } else if (a.name == "linear_backward [6 x 5] -> 7") {
      EXPECT_EQ(a.calls, 1);
      EXPECT_EQ(a.flops, 2 * 2.0 * N * C * OC);  // dinp and dw
    } else {
      EXPECT_EQ(a.name, "sum_squares");
      EXPECT_EQ(a.calls, 1);
      EXPECT_EQ(a.flops, 0.0);
    }
  }
  EXPECT_DOUBLE_EQ(timed.total_seconds(), seconds);
  for (size_t i = 1; i < acc.size(); ++i) EXPECT_GE(acc[i - 1].seconds, acc[i].seconds);  // largest first

  timed.set_enabled(false);
  timed.reset();
  timed.fill(dinp.data(), 1.0f, N * C);
  EXPECT_TRUE(timed.accounts().empty());
  EXPECT_EQ(dinp[0], 1.0f);
}

}  // namespace
}  // namespace occ::kernels
