#include "comm/delay_line.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "core/error.h"

namespace occ {

DelayLine::Clock::time_point DelayLine::schedule_after(std::chrono::nanoseconds delay, std::function<void()> action) {
  std::unique_lock<std::mutex> lock(mu_);
  // Stamped under the lock: with one delay for every action, due times then
  // never decrease, and max() keeps the order whatever the delays.
  const Clock::time_point due = std::max(Clock::now() + delay, last_due_);
  last_due_ = due;
  const bool was_idle = queue_.empty();
  queue_.push_back({due, std::move(action)});
  stop_ = false;
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  if (was_idle) wake_.notify_one();
  return due;
}

void DelayLine::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (queue_.empty()) {
      drained_.notify_all();
      if (stop_) return;
      wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      continue;
    }
    const Clock::time_point due = queue_.front().due;
    if (Clock::now() < due) {
      wake_.wait_until(lock, due);  // new entries go behind the front: it stays first
      continue;
    }
    std::function<void()> action = std::move(queue_.front().action);
    running_action_ = true;
    lock.unlock();
    action();
    lock.lock();
    running_action_ = false;
    queue_.pop_front();
  }
}

void DelayLine::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  drained_.wait(lock, [&] { return queue_.empty() && !running_action_; });
}

void DelayLine::stop() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!thread_.joinable()) return;
    stop_ = true;
    wake_.notify_one();
  }
  thread_.join();  // the thread runs what is queued first
  thread_ = std::thread();
}

std::chrono::nanoseconds parse_latency(const std::string& text, const std::string& source) {
  const auto bad = [&](const char* why) -> std::chrono::nanoseconds {
    fail("{} '{}' {}; use a time such as 50ms, 200us, 0.2ms or 0 (none)", source, printable(text), why);
  };
  if (text == "0") return std::chrono::nanoseconds(0);
  size_t digits = 0;
  while (digits < text.size() && (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.')) ++digits;
  const std::string number = text.substr(0, digits), unit = text.substr(digits);
  double scale = 0;
  if (unit == "us") scale = 1e3;
  else if (unit == "ms") scale = 1e6;
  else if (unit == "s") scale = 1e9;
  if (number.empty() || scale == 0 || std::count(number.begin(), number.end(), '.') > 1) return bad("is not a time");
  const double ns = std::strtod(number.c_str(), nullptr) * scale;
  if (!(ns <= 10e9)) return bad("is more than 10 s");
  return std::chrono::nanoseconds(std::llround(ns));
}

std::string latency_text(std::chrono::nanoseconds d) {
  const double ms = double(d.count()) / 1e6;
  return ms >= 1 ? fmt::format("{:g} ms", ms) : fmt::format("{:g} us", double(d.count()) / 1e3);
}

}  // namespace occ
