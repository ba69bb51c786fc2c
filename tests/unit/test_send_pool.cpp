// SendPool (parallel/send_pool.h): a buffer a link still sends is never handed
// out again, and one it has sent is reused, so a rank holds only the messages
// in flight.
#include <gtest/gtest.h>

#include <memory>

#include "core/buffer.h"
#include "parallel/send_pool.h"

namespace occ {
namespace {

// A link whose sends complete when the test says so.
class FakeLink final : public PipelineLink {
 public:
  uint64_t send_async(const void*, size_t, Traffic, const char*) override { return issued++; }
  uint64_t sends_done() override { return done; }
  void wait_sends() override { done = issued; }
  void recv(void*, size_t, const char*) override {}
  size_t recv_upto(void*, size_t, const char*) override { return 0; }
  uint64_t issued = 0, done = 0;
};

SendPool<DeviceBuffer<float>> cpu_pool() {
  return SendPool<DeviceBuffer<float>>([](size_t n) { return std::make_unique<DeviceBuffer<float>>(Device::Cpu, n); });
}

TEST(SendPool, ReusesABufferOnlyOnceItsLinkHasSentIt) {
  auto pool = cpu_pool();
  FakeLink link;
  float* a = pool.take(100);
  pool.sending(a, &link, link.send_async(a, 400, Traffic::Other, ""));  // send 0
  float* b = pool.take(100);
  EXPECT_NE(a, b) << "a buffer still being sent was handed out";
  pool.sending(b, &link, link.send_async(b, 400, Traffic::Other, ""));  // send 1
  link.done = 1;  // send 0 is done, send 1 is not
  EXPECT_EQ(pool.take(100), a);
  EXPECT_EQ(pool.buffers(), 2u);
  // Taken and not yet sent: not handed out twice.
  float* c = pool.take(50);
  EXPECT_NE(c, a);
  EXPECT_NE(c, b);
  EXPECT_EQ(pool.buffers(), 3u);
}

TEST(SendPool, ASliceMarksItsWholeBufferAndGivingBackFreesIt) {
  auto pool = cpu_pool();
  FakeLink link;
  float* a = pool.take(64);
  // A TP rank sends its slice, the buffer's second half.
  pool.sending(a + 32, &link, link.send_async(a + 32, 128, Traffic::Other, ""));
  float* b = pool.take(64);
  EXPECT_NE(a, b);
  pool.give_back(b);  // encoded or copied out: not in flight
  EXPECT_EQ(pool.take(64), b);
  // Not from the pool: ignored.
  float outside[4];
  pool.sending(outside, &link, 7);
  pool.give_back(outside);
  EXPECT_EQ(pool.buffers(), 2u);
  // After the links' wait_sends, everything is free again.
  pool.all_sent();
  EXPECT_EQ(pool.take(64), a);
}

TEST(SendPool, AFreeBufferTooSmallIsReplacedNotAdded) {
  auto pool = cpu_pool();
  float* small = pool.take(8);
  pool.give_back(small);
  float* big = pool.take(1024);
  EXPECT_EQ(pool.buffers(), 1u);
  big[1023] = 1.0f;  // really 1024 floats (ASan checks it)
  pool.give_back(big);
  EXPECT_EQ(pool.take(16), big);
}

}  // namespace
}  // namespace occ
