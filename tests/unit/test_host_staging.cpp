// Host staging, the path of multi-rank GPU jobs (core/host_staging.h,
// comm/host_staged_communicator.h), on the CPU: the host view of a staged
// buffer is a separate copy that only download / upload move data into and out
// of, range by range; the staged communicator hands its inner communicator a
// host copy of the operands (never the caller's pointer) and copies the result
// back, with the same counts and traffic classes.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "comm/host_staged_communicator.h"
#include "comm/node_ranks.h"
#include "core/host_staging.h"

namespace occ {
namespace {

TEST(HostMirror, UnstagedIsTheBufferItself) {
  std::vector<float> data(8, 1.0f);
  HostMirror m(Device::Cpu, data.data(), data.size(), false);
  EXPECT_FALSE(m.staged());
  EXPECT_EQ(m.host(), data.data());
  m.download_all();  // no-ops
  m.upload_all();
  EXPECT_EQ(data, std::vector<float>(8, 1.0f));
}

TEST(HostMirror, StagedCopiesOnlyTheRangesAskedFor) {
  std::vector<float> data(10);
  std::iota(data.begin(), data.end(), 0.0f);
  HostMirror m(Device::Cpu, data.data(), data.size(), true);
  ASSERT_TRUE(m.staged());
  ASSERT_NE(m.host(), data.data());
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(m.host()[i], 0.0f) << "a new host copy is zero-filled";
  m.download(2, 3);  // elements 2, 3, 4
  EXPECT_EQ(m.host()[1], 0.0f);
  EXPECT_EQ(m.host()[2], 2.0f);
  EXPECT_EQ(m.host()[4], 4.0f);
  EXPECT_EQ(m.host()[5], 0.0f);
  for (size_t i = 0; i < 10; ++i) m.host()[i] = -1.0f;
  m.upload(4, 2);  // elements 4, 5 only
  const std::vector<float> want{0, 1, 2, 3, -1, -1, 6, 7, 8, 9};
  EXPECT_EQ(data, want);
  m.upload_all();
  EXPECT_EQ(data, std::vector<float>(10, -1.0f));
}

// The reducer thread's path (parallel/grad_sync.cpp): copies on a CopyQueue
// after a DeviceMark move the same ranges as the plain ones. (On the CPU the
// mark is a no-op and the copies are immediate; tests/cuda checks the GPU's
// ordering.)
TEST(HostMirror, QueuedCopiesMoveTheSameRanges) {
  std::vector<float> data(10);
  std::iota(data.begin(), data.end(), 0.0f);
  HostMirror m(Device::Cpu, data.data(), data.size(), true);
  CopyQueue queue(Device::Cpu);
  DeviceMark ready(Device::Cpu);
  ready.record();
  EXPECT_EQ(ready.handle(), nullptr) << "the CPU queues nothing to mark";
  m.download(3, 4, queue, ready);  // elements 3..6
  EXPECT_EQ(m.host()[2], 0.0f);
  EXPECT_EQ(m.host()[3], 3.0f);
  EXPECT_EQ(m.host()[6], 6.0f);
  EXPECT_EQ(m.host()[7], 0.0f);
  for (size_t i = 0; i < 10; ++i) m.host()[i] *= 10.0f;
  m.upload(5, 2, queue);  // elements 5, 6 only
  const std::vector<float> want{0, 1, 2, 3, 4, 50, 60, 7, 8, 9};
  EXPECT_EQ(data, want);
  HostMirror unstaged(Device::Cpu, data.data(), data.size(), false);
  unstaged.host()[0] = 42.0f;
  unstaged.upload(0, 10, queue);  // the host view is the buffer: nothing to copy
  unstaged.download(0, 10, queue, ready);
  EXPECT_EQ(data[0], 42.0f);
}

// A two-rank group that records what it was given and acts as if the other
// rank held `other`'s values.
class RecordingCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void allreduce_sum(TensorRef ref, size_t count, Traffic traffic) override {
    float* data = ref.f32();
    seen = data;
    seen_count = count;
    seen_traffic = traffic;
    for (size_t i = 0; i < count; ++i) data[i] += other;
  }
  void allreduce_max(float* data, size_t count, Traffic traffic) override {
    seen = data;
    seen_count = count;
    seen_traffic = traffic;
    for (size_t i = 0; i < count; ++i) data[i] = std::max(data[i], other);
  }
  void allgather(ConstTensorRef in_ref, TensorRef out_ref, size_t count, Traffic traffic) override {
    const float* in = in_ref.f32();
    float* out = out_ref.f32();
    seen = out;
    seen_in = in;
    seen_count = count;
    seen_traffic = traffic;
    for (size_t i = 0; i < count; ++i) {
      out[i] = in[i];
      out[count + i] = other;
    }
  }
  void reduce_scatter(ConstTensorRef in_ref, TensorRef out_ref, size_t count, Traffic traffic) override {
    const float* in = in_ref.f32();
    float* out = out_ref.f32();
    seen = out;
    seen_in = in;
    seen_count = count;
    seen_traffic = traffic;
    for (size_t i = 0; i < count; ++i) out[i] = in[i] + other;
  }
  float other = 10.0f;
  const float* seen = nullptr;
  const float* seen_in = nullptr;
  size_t seen_count = 0;
  Traffic seen_traffic = Traffic::Other;
};

TEST(HostStagedCommunicator, CollectivesRunOnHostCopies) {
  RecordingCommunicator inner;
  HostStagedCommunicator comm(inner, Device::Cpu);
  EXPECT_EQ(comm.size(), 2);
  std::vector<float> x{1, 2, 3, 4, 5};
  comm.allreduce_sum(x.data() + 1, 3, Traffic::TensorParallel);
  EXPECT_NE(inner.seen, x.data() + 1) << "the inner communicator must get the host copy";
  EXPECT_EQ(inner.seen_count, 3u);
  EXPECT_EQ(inner.seen_traffic, Traffic::TensorParallel);
  EXPECT_EQ(x, (std::vector<float>{1, 12, 13, 14, 5}));

  inner.other = 13.5f;
  comm.allreduce_max(x.data(), 5, Traffic::Other);
  EXPECT_EQ(x, (std::vector<float>{13.5f, 13.5f, 13.5f, 14, 13.5f}));

  // In place, as the pipeline's scatter-gather calls it: `in` inside `out`.
  std::vector<float> y{0, 0, 7, 8};
  inner.other = -1.0f;
  comm.allgather(y.data() + 2, y.data(), 2, Traffic::PipelineForward);
  EXPECT_NE(inner.seen, y.data());
  EXPECT_NE(inner.seen_in, y.data() + 2);
  EXPECT_EQ(inner.seen_traffic, Traffic::PipelineForward);
  EXPECT_EQ(y, (std::vector<float>{7, 8, -1, -1}));

  // Sequence parallelism's reduce-scatter: the whole [size x count] input staged, this rank's block of the sum back.
  std::vector<float> blocks{1, 2, 3, 4}, mine{0, 0};
  inner.other = 0.5f;
  comm.reduce_scatter(blocks.data(), mine.data(), 2, Traffic::TensorParallel);
  EXPECT_NE(inner.seen_in, blocks.data());
  EXPECT_NE(inner.seen, mine.data());
  EXPECT_EQ(inner.seen_count, 2u);
  EXPECT_EQ(mine, (std::vector<float>{1.5f, 2.5f}));
}

TEST(NodeRanks, GpuOfLocalRankWrapsAroundTheGpus) {
  EXPECT_EQ(gpu_of_local_rank(0, 1), 0);
  EXPECT_EQ(gpu_of_local_rank(3, 1), 0);  // 4 ranks share 1 GPU
  EXPECT_EQ(gpu_of_local_rank(3, 8), 3);  // one GPU each
  EXPECT_EQ(gpu_of_local_rank(5, 4), 1);
  EXPECT_EQ(gpu_of_local_rank(2, 0), 0);
}

}  // namespace
}  // namespace occ
