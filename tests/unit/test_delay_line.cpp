// The delivery rule of the emulated latency (comm/delay_line.h): an action
// scheduled with a delay D runs no earlier than its scheduling time + D, in
// the order the actions were scheduled; and the latency's syntax.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/delay_line.h"
#include "core/error.h"

namespace occ {
namespace {

using Clock = DelayLine::Clock;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;

TEST(DelayLine, RunsEachActionNoEarlierThanItsSendTimePlusTheDelay) {
  DelayLine line;
  constexpr int kActions = 12;
  const nanoseconds delay = milliseconds(15);
  std::vector<Clock::time_point> sent(kActions), due(kActions), ran(kActions);
  std::mutex mu;
  for (int i = 0; i < kActions; ++i) {
    sent[size_t(i)] = Clock::now();
    due[size_t(i)] = line.schedule_after(delay, [&, i] {
      std::lock_guard<std::mutex> lock(mu);
      ran[size_t(i)] = Clock::now();
    });
    if (i % 3 == 2) std::this_thread::sleep_for(milliseconds(4));  // some while others wait
  }
  line.drain();
  std::lock_guard<std::mutex> lock(mu);
  for (int i = 0; i < kActions; ++i) {
    EXPECT_GE(due[size_t(i)], sent[size_t(i)] + delay) << "action " << i;
    EXPECT_GE(ran[size_t(i)], due[size_t(i)]) << "action " << i << " ran before its due time";
    if (i > 0) EXPECT_GE(ran[size_t(i)], ran[size_t(i - 1)]) << "action " << i << " overtook the one before";
  }
}

TEST(DelayLine, KeepsTheOrderOfSchedulingWhenALaterActionHasAShorterDelay) {
  DelayLine line;
  std::vector<int> order;
  std::mutex mu;
  const Clock::time_point first = line.schedule_after(milliseconds(30), [&] {
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(1);
  });
  const Clock::time_point second = line.schedule_after(nanoseconds(0), [&] {
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(2);
  });
  EXPECT_EQ(second, first);  // one wire: it cannot arrive before the message sent ahead of it
  line.drain();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

TEST(DelayLine, DrainWaitsForEveryActionAndTheLineRestartsAfterStop) {
  DelayLine line;
  int runs = 0;  // written by the line's thread, read after drain()/stop()
  line.schedule_after(milliseconds(5), [&] { ++runs; });
  line.schedule_after(milliseconds(5), [&] { ++runs; });
  line.drain();
  EXPECT_EQ(runs, 2);
  line.schedule_after(milliseconds(5), [&] { ++runs; });
  line.stop();  // runs what is queued, then ends its thread
  EXPECT_EQ(runs, 3);
  const Clock::time_point before = Clock::now();
  line.schedule_after(milliseconds(5), [&] { ++runs; });
  line.drain();
  EXPECT_EQ(runs, 4);
  EXPECT_GE(Clock::now(), before + milliseconds(5));
}

TEST(DelayLine, ParsesTcTimesAndRefusesAnythingElse) {
  EXPECT_EQ(parse_latency("0", "X"), nanoseconds(0));
  EXPECT_EQ(parse_latency("50ms", "X"), milliseconds(50));
  EXPECT_EQ(parse_latency("0.2ms", "X"), nanoseconds(200'000));
  EXPECT_EQ(parse_latency("200us", "X"), nanoseconds(200'000));
  EXPECT_EQ(parse_latency("1s", "X"), nanoseconds(1'000'000'000));
  for (const char* bad : {"", "50", "fast", "-5ms", "1.2.3ms", "ms", "5 ms", "20s", "5min"})
    EXPECT_THROW(parse_latency(bad, "OCC_EMULATED_LATENCY"), Error) << "'" << bad << "'";
  try {
    parse_latency("fast", "OCC_EMULATED_LATENCY");
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "OCC_EMULATED_LATENCY 'fast' is not a time; use a time such as 50ms, 200us, 0.2ms or 0 (none)");
  }
  EXPECT_EQ(latency_text(milliseconds(50)), "50 ms");
  EXPECT_EQ(latency_text(nanoseconds(200'000)), "200 us");
}

}  // namespace
}  // namespace occ
