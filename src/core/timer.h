#pragma once
#include <chrono>
#include <map>
#include <string>

namespace occ {

inline double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

// Accumulates wall time per named phase; reset once per iteration.
class PhaseTimers {
 public:
  void add(const std::string& phase, double seconds) { ms_[phase] += seconds * 1e3; }
  const std::map<std::string, double>& ms() const { return ms_; }
  void reset() { ms_.clear(); }

 private:
  std::map<std::string, double> ms_;
};

// RAII: adds the scope's duration to one phase.
class ScopedPhase {
 public:
  ScopedPhase(PhaseTimers& timers, const char* phase) : timers_(timers), phase_(phase), start_(now_seconds()) {}
  ~ScopedPhase() { timers_.add(phase_, now_seconds() - start_); }
  ScopedPhase(const ScopedPhase&) = delete;
  ScopedPhase& operator=(const ScopedPhase&) = delete;

 private:
  PhaseTimers& timers_;
  const char* phase_;
  double start_;
};

}  // namespace occ
