#pragma once
// The delivery rule of an emulated link's latency (docs/emulated-cluster.md,
// "Latency"): an action (posting a message to the network) runs on the line's
// own thread no earlier than the time it was scheduled plus the delay, and the
// actions run in the order they were scheduled, as bytes leave one wire. The
// clock is std::chrono::steady_clock (CLOCK_MONOTONIC on Linux), which every
// rank on one machine shares. No MPI here, so the rule is tested alone.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace occ {

class DelayLine {
 public:
  using Clock = std::chrono::steady_clock;
  DelayLine() = default;
  ~DelayLine() { stop(); }
  DelayLine(const DelayLine&) = delete;
  DelayLine& operator=(const DelayLine&) = delete;

  // Runs `action` on the line's thread at now + delay or later, after every
  // action scheduled before it (so its due time is at least theirs). Returns
  // the due time. The thread starts on the first call.
  Clock::time_point schedule_after(std::chrono::nanoseconds delay, std::function<void()> action);
  // Returns once every action scheduled so far has run.
  void drain();
  // drain(), then ends the thread (a later schedule_after starts it again).
  void stop();

 private:
  struct Entry {
    Clock::time_point due;
    std::function<void()> action;
  };
  void run();

  std::mutex mu_;
  std::condition_variable wake_, drained_;
  std::deque<Entry> queue_;
  Clock::time_point last_due_{};
  bool running_action_ = false, stop_ = false;
  std::thread thread_;
};

// "50ms", "200us", "0.2ms", "1s" or "0" (tc's time syntax, as scripts/cluster.sh
// --latency takes it) -> nanoseconds. Throws occ::Error naming `source` for
// anything else, a negative value, or more than 10 s.
std::chrono::nanoseconds parse_latency(const std::string& text, const std::string& source);
// "50 ms", "200 us", "0.2 ms".
std::string latency_text(std::chrono::nanoseconds d);

}  // namespace occ
