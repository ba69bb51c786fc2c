// Sequence parallelism's pieces that need no second process: a rank's share of
// the rows, which may start inside a sample, gets exactly the dropout masks of
// those rows in the whole tensor (kernels::Dropout::row0), so an SP run trains
// the model the unsplit run trains; and the one-process group's reduce-scatter
// is a copy.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "kernels/kernels.h"

namespace occ {
namespace {

std::vector<float> ramp(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = scale * float(i % 17 + 1);
  return v;
}

TEST(SequenceParallel, DropoutOnARowShardEqualsTheWholeTensorsRows) {
  const int64_t T = 6, B = 3, C = 5, N = B * T;  // shards of 4 rows and 9 rows start mid-sample
  const kernels::Dropout whole{0xC0FFEE, 0.3f, 7};
  std::vector<float> full(size_t(N * C), 1.0f);
  kernels::dropout_inplace(full.data(), whole, N, T, C);
  const std::vector<float> x = ramp(N * C, 0.5f), residual = ramp(N * C, -0.25f), bias = ramp(C, 0.125f);
  std::vector<float> full_out(size_t(N * C)), full_dx(size_t(N * C)), full_db(size_t(C), 0.0f);
  kernels::bias_dropout_add_forward(full_out.data(), residual.data(), x.data(), bias.data(), whole, N, T, C);
  kernels::bias_dropout_add_backward(full_dx.data(), full_db.data(), x.data(), whole, N, T, C);
  int dropped = 0;
  for (float v : full) dropped += v == 0.0f;
  ASSERT_GT(dropped, 0);  // the test sees masks at all
  for (auto [row0, rows] : {std::pair<int64_t, int64_t>{4, 4}, {9, 9}, {0, 18}, {17, 1}}) {
    kernels::Dropout shard = whole;
    shard.row0 = row0;
    std::vector<float> part(size_t(rows * C), 1.0f);
    kernels::dropout_inplace(part.data(), shard, rows, T, C);
    std::vector<float> out(size_t(rows * C)), dx(size_t(rows * C)), db(size_t(C), 0.0f);
    const int64_t at = row0 * C;
    kernels::bias_dropout_add_forward(out.data(), residual.data() + at, x.data() + at, bias.data(), shard, rows, T, C);
    kernels::bias_dropout_add_backward(dx.data(), db.data(), x.data() + at, shard, rows, T, C);
    for (int64_t i = 0; i < rows * C; ++i) {
      ASSERT_EQ(part[size_t(i)], full[size_t(at + i)]) << "dropout_inplace row0 " << row0 << " element " << i;
      ASSERT_EQ(out[size_t(i)], full_out[size_t(at + i)]) << "bias_dropout_add_forward row0 " << row0;
      ASSERT_EQ(dx[size_t(i)], full_dx[size_t(at + i)]) << "bias_dropout_add_backward row0 " << row0;
    }
  }
  // Without row0 the shard would take the first rows' masks: the test can tell.
  std::vector<float> wrong(size_t(4 * C), 1.0f);
  kernels::dropout_inplace(wrong.data(), whole, 4, T, C);
  EXPECT_NE(wrong, std::vector<float>(full.begin() + 4 * C, full.begin() + 8 * C));
}

TEST(SequenceParallel, OneProcessReduceScatterIsACopy) {
  SelfCommunicator self;
  const std::vector<float> in = ramp(12, 1.0f);
  std::vector<float> out(12, 0.0f);
  self.reduce_scatter(in.data(), out.data(), 12, Traffic::TensorParallel);
  EXPECT_EQ(out, in);
}

}  // namespace
}  // namespace occ
