#include "apps/commands/hang_watch.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"

namespace occ::cmd {

namespace fs = std::filesystem;

namespace {
// The liveness thread bumps its counter every 0.5 s: a rank that has not for
// this long is stopped or frozen.
constexpr double kAliveWindow = 2.5;

std::string where(const heartbeat::Activity& a) {
  std::string s = a.phase.empty() ? "start-up" : a.phase;
  if (a.micro_batch >= 0) s += fmt::format(" of micro-batch {}", a.micro_batch);
  if (a.chunk > 0) s += fmt::format(" (model chunk {})", a.chunk);
  if (a.iteration > 0) s += fmt::format(" in iteration {}", a.iteration);
  return s;
}

std::string wait_text(const heartbeat::Activity& a) {
  return fmt::format("{} ({} group{})", a.wait_what, a.group, a.peer >= 0 ? fmt::format(", from/to rank {}", a.peer) : "");
}
}  // namespace

HangWatch::HangWatch(std::string dir, double timeout_s) : dir_(std::move(dir)), timeout_s_(timeout_s) {}

void HangWatch::reset() {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) fail("launch: cannot create the heartbeat directory {}: {}; check that --save is writable, or pass "
               "--heartbeat-dir", dir_, ec.message());
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename().string().rfind("rank_", 0) == 0) fs::remove(it->path(), ec);
  ranks_.clear();
  seen_.clear();
  world_size_ = 0;
  armed_at_ = progress_at_ = -1;
}

void HangWatch::poll(double now) {
  if (world_size_ == 0) {
    // The world size from whichever rank wrote first.
    std::error_code ec;
    for (fs::directory_iterator it(dir_, ec), end; !ec && it != end && world_size_ == 0; it.increment(ec))
      if (auto s = heartbeat::read(it->path().string()); s && s->world_size > 0) world_size_ = s->world_size;
    if (world_size_ == 0) return;
    ranks_.assign(size_t(world_size_), heartbeat::Snapshot{});
    seen_.assign(size_t(world_size_), Seen{});
  }
  bool all = true, moved = false;
  for (int r = 0; r < world_size_; ++r) {
    heartbeat::Snapshot& last = ranks_[size_t(r)];
    Seen& seen = seen_[size_t(r)];
    auto s = heartbeat::read(heartbeat::file_path(dir_, r));
    if (!s) {
      all = all && last.rank >= 0;  // (a file being replaced reads as missing for an instant)
      continue;
    }
    if (last.rank < 0 || s->progress != seen.progress) {
      seen.progress = s->progress;
      seen.progress_at = now;
      moved = true;
    }
    if (last.rank < 0 || s->alive != seen.alive) {
      seen.alive = s->alive;
      seen.alive_at = now;
    }
    last = std::move(*s);
  }
  if (armed_at_ < 0) {
    if (!all) return;
    armed_at_ = progress_at_ = now;
  }
  // Long local work (a checkpoint write, a load): slow, not hung. A busy rank that waits for
  // others (the save agreement waits for the writers without a timeout) is not working: it
  // is the writers' progress that counts, and a writer stopped there is a hang.
  for (size_t i = 0; i < ranks_.size(); ++i)
    if (ranks_[i].busy && !ranks_[i].main.waiting && alive(i, now)) moved = true;
  if (moved) progress_at_ = now;
}

bool HangWatch::alive(size_t i, double now) const { return now - seen_[i].alive_at < kAliveWindow; }

bool HangWatch::hung(double now) const { return timeout_s_ > 0 && armed_at_ >= 0 && now - progress_at_ >= timeout_s_; }

std::vector<std::string> HangWatch::describe(double now) const {
  std::vector<std::string> lines;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    const heartbeat::Snapshot& s = ranks_[i];
    if (s.rank < 0) {
      lines.push_back(fmt::format("rank {}: no heartbeat (not started)", i));
      continue;
    }
    const double still = now - seen_[i].progress_at;
    std::string state;
    if (!alive(i, now))
      state = fmt::format("stopped or frozen: no sign of life for {:.1f} s; last in {}", now - seen_[i].alive_at,
                          where(s.main));
    else if (s.state == heartbeat::State::Done || s.state == heartbeat::State::Failed)
      state = fmt::format("{}, in {}", heartbeat::state_name(s.state), where(s.main));
    else if (s.main.waiting)
      state = fmt::format("waiting {:.1f} s for {}, in {}", still, wait_text(s.main), where(s.main));
    else if (s.background.waiting)
      state = fmt::format("no progress for {:.1f} s, in {}; its background thread waits for {}", still,
                          where(s.main), wait_text(s.background));
    else if (s.busy)
      state = fmt::format("busy for {:.1f} s: {}", still, s.busy_what);
    else
      state = fmt::format("computing, no progress for {:.1f} s: in {}", still, where(s.main));
    lines.push_back(fmt::format("rank {} (pid {} on {}): {}", s.rank, s.pid, s.host, state));
  }
  return lines;
}

int HangWatch::ranks_present() const {
  return int(std::count_if(ranks_.begin(), ranks_.end(), [](const heartbeat::Snapshot& s) { return s.rank >= 0; }));
}

std::optional<int64_t> HangWatch::resumed_from() const {
  std::optional<int64_t> from;
  for (const auto& s : ranks_)
    if (s.resumed_from >= 0) from = std::max(from.value_or(0), s.resumed_from);
  return from;
}

int64_t HangWatch::iteration_begun() const {
  int64_t begun = 0;
  for (const auto& s : ranks_) begun = std::max(begun, s.main.iteration);
  return begun;
}

bool HangWatch::reached_training() const {
  return std::any_of(ranks_.begin(), ranks_.end(), [](const heartbeat::Snapshot& s) { return s.reached_training; });
}

int64_t HangWatch::iterations_done() const {
  int64_t done = 0;
  for (const auto& s : ranks_) done = std::max(done, s.iterations_done);
  return done;
}

std::string HangWatch::reported_failure() const {
  for (const auto& s : ranks_)
    if (s.state == heartbeat::State::Failed && !s.message.empty()) return s.message;
  return "";
}

bool HangWatch::failed_at_startup() const {
  for (const auto& s : ranks_)
    if (s.state == heartbeat::State::Failed && s.failed_at_startup) return true;
  return false;
}

}  // namespace occ::cmd
