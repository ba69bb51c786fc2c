#pragma once
// Wall-clock phase timers, and (optionally) the timeline of every timed
// scope for a Chrome/Perfetto trace.
#include <time.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace occ {

inline double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

// CPU time consumed by this process (all threads), in seconds.
inline double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// CPU time consumed by the calling thread, in seconds.
inline double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

struct TraceEvent {
  std::string name;
  double start = 0, end = 0;  // seconds (steady clock)
  int thread = 0;             // 0: main (compute + pipeline), 1: data-parallel reducer, 2: parameter all-gather
};

// Accumulates wall time per named phase; reset once per iteration. When
// tracing, also keeps every scope as an event (cleared only by take_trace()).
class PhaseTimers {
 public:
  void add(const std::string& phase, double seconds) { ms_[phase] += seconds * 1e3; }
  void add_event(const std::string& name, double start, double end, int thread = 0) {
    if (tracing_) events_.push_back({name, start, end, thread});
  }
  const std::map<std::string, double>& ms() const { return ms_; }
  double ms(const std::string& phase) const {
    auto it = ms_.find(phase);
    return it == ms_.end() ? 0.0 : it->second;
  }
  // Per-iteration counters and measurements that are not times.
  void count(const std::string& name, double value) { counts_[name] += value; }
  double count(const std::string& name) const {
    auto it = counts_.find(name);
    return it == counts_.end() ? 0.0 : it->second;
  }
  void reset() {
    ms_.clear();
    counts_.clear();
  }
  void enable_trace() { tracing_ = true; }
  bool tracing() const { return tracing_; }
  std::vector<TraceEvent> take_trace() { return std::move(events_); }

 private:
  std::map<std::string, double> ms_, counts_;
  bool tracing_ = false;
  std::vector<TraceEvent> events_;
};

// RAII: adds the scope's duration to one phase (and to the trace, named
// `event` if given, else after the phase).
class ScopedPhase {
 public:
  ScopedPhase(PhaseTimers& timers, const char* phase, std::string event = {})
      : timers_(timers), phase_(phase), event_(std::move(event)), start_(now_seconds()) {}
  ~ScopedPhase() {
    const double end = now_seconds();
    timers_.add(phase_, end - start_);
    if (timers_.tracing()) timers_.add_event(event_.empty() ? phase_ : event_, start_, end);
  }
  ScopedPhase(const ScopedPhase&) = delete;
  ScopedPhase& operator=(const ScopedPhase&) = delete;

 private:
  PhaseTimers& timers_;
  const char* phase_;
  std::string event_;
  double start_;
};

}  // namespace occ
