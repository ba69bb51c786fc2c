// The layer-neutral pieces of gradient synchronisation:
//   * make_buckets (parallel/grad_sync.h) over TensorDescs: whole tensors of one
//     group per bucket, from the end of the buffer, a bucket closed once it holds
//     bucket_elems or more, group < 0 left out (and splitting its neighbours).
//   * describe (model/tensor_descs.h): a ParamTensor as the rows x cols matrix
//     DP PowerSGD compresses (shape[0] x the rest) with its init key.
//   * CompressionState (compress/compression_state.h): saved DP PowerSGD state
//     loads back bit-exactly, and each mismatch yields its notice.
#include <gtest/gtest.h>

#include <vector>

#include "compress/compression_state.h"
#include "compress/dp_powersgd.h"
#include "core/tensor_file.h"
#include "model/tensor_descs.h"
#include "parallel/grad_sync.h"
#include "temp_dir.h"

namespace occ {
namespace {

std::vector<TensorDesc> three_tensors() {
  // a [0, 10), b [10, 15), c [15, 35)
  return {{"a", 0, 10, 10, 1, 1}, {"b", 10, 5, 5, 1, 2}, {"c", 15, 20, 4, 5, 3}};
}

std::vector<std::pair<int64_t, int64_t>> ranges(const std::vector<GradBucket>& buckets) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const auto& b : buckets) out.push_back({b.begin, b.end});
  return out;
}

TEST(MakeBuckets, OneBucketWhenEverythingFits) {
  auto b = make_buckets(three_tensors(), 1000, [](const TensorDesc&) { return 0; });
  EXPECT_EQ(ranges(b), (std::vector<std::pair<int64_t, int64_t>>{{0, 35}}));
}

TEST(MakeBuckets, ClosesABucketOnceItHoldsBucketElems) {
  auto b = make_buckets(three_tensors(), 16, [](const TensorDesc&) { return 0; });
  EXPECT_EQ(ranges(b), (std::vector<std::pair<int64_t, int64_t>>{{15, 35}, {0, 15}}));
}

TEST(MakeBuckets, GroupsNeverShareABucketAndNegativeGroupsAreLeftOut) {
  auto by_group = make_buckets(three_tensors(), 1000, [](const TensorDesc& t) { return t.name == "c" ? 1 : 0; });
  EXPECT_EQ(ranges(by_group), (std::vector<std::pair<int64_t, int64_t>>{{15, 35}, {0, 15}}));
  EXPECT_EQ(by_group[0].group, 1);
  EXPECT_EQ(by_group[1].group, 0);
  auto without_b = make_buckets(three_tensors(), 1000, [](const TensorDesc& t) { return t.name == "b" ? -1 : 0; });
  EXPECT_EQ(ranges(without_b), (std::vector<std::pair<int64_t, int64_t>>{{15, 35}, {0, 10}}));
}

TEST(Describe, MatrixViewAndKeyOfAParamTensor) {
  ParamTensor t;
  t.name = "layers.0.attention.query_key_value.weight";
  t.shape = {6, 4, 2};
  t.numel = 48;
  t.offset = 100;
  t.init_key = 77;
  const TensorDesc d = describe(t);
  EXPECT_EQ(d.name, t.name);
  EXPECT_EQ(d.offset, 100);
  EXPECT_EQ(d.numel, 48);
  EXPECT_EQ(d.rows, 6);
  EXPECT_EQ(d.cols, 8);
  EXPECT_EQ(d.key, 77u);
}

TEST(CompressionState, RoundTripAndNotices) {
  test::TempDir dir;
  GradCompressionConfig cfg;
  cfg.enabled = true;
  cfg.rank = 2;
  cfg.error_feedback = true;
  const std::vector<TensorDesc> mats = {{"w1", 0, 24, 6, 4, 11}, {"w2", 24, 15, 3, 5, 12}};
  DataParallelPowerSgd saved(cfg, mats, 7, kernels::cpu_ops());
  const std::string path = dir / "state.bin";
  const CompressionState state({}, &saved);
  ASSERT_FALSE(state.empty());
  state.save(path, {{"iteration", 3}});

  // Another seed: different warm starts until the saved ones are loaded.
  DataParallelPowerSgd loaded(cfg, mats, 8, kernels::cpu_ops());
  EXPECT_EQ(CompressionState({}, &loaded).load(path), CompressionNotice::None);
  TensorFileWriter a, b;
  saved.save_state(a);
  loaded.save_state(b);
  const std::string pa = dir / "a.bin", pb = dir / "b.bin";
  a.write(pa);
  b.write(pb);
  const TensorFileReader ra = TensorFileReader::open(pa), rb = TensorFileReader::open(pb);
  for (const char* name : {"dp/w1/q", "dp/w2/q", "dp/w1/error", "dp/w2/error"}) {
    std::vector<float> x(size_t(ra.numel(name))), y(size_t(rb.numel(name)));
    ra.read(name, x.data(), int64_t(x.size()));
    rb.read(name, y.data(), int64_t(y.size()));
    EXPECT_EQ(x, y) << name;
  }

  EXPECT_EQ(CompressionState({}, nullptr).load(path), CompressionNotice::Unused);
  EXPECT_EQ(CompressionState({}, &loaded).load(dir / "absent.bin"), CompressionNotice::Missing);
  EXPECT_EQ(CompressionState({}, nullptr).load(dir / "absent.bin"), CompressionNotice::None);
  cfg.rank = 3;  // another rank: the saved warm starts do not fit
  DataParallelPowerSgd other(cfg, mats, 7, kernels::cpu_ops());
  EXPECT_EQ(CompressionState({}, &other).load(path), CompressionNotice::Partial);
  EXPECT_EQ(CompressionState::file_name(4), "compress_dp_004.bin");
}

}  // namespace
}  // namespace occ
