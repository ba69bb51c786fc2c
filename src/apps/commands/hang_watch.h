#pragma once
// How `optimus-cc launch` tells a hung job from a slow one: it reads every
// rank's heartbeat (core/heartbeat.h) and calls the job hung when, for the
// hang timeout, no rank's progress counter moved and no rank was inside long
// local work (start-up, a checkpoint's snapshot or write) while alive. The
// clock starts once every rank has a heartbeat, so start-up up to then (MPI's
// own) never counts. Times are the supervisor's own clock: the hosts' clocks
// need not agree.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/heartbeat.h"

namespace occ::cmd {

class HangWatch {
 public:
  HangWatch(std::string dir, double timeout_s);

  const std::string& dir() const { return dir_; }
  // Before an attempt: forgets the last one and removes its files (creating the directory).
  void reset();
  // Reads the files; `now` in seconds (steady clock).
  void poll(double now);
  // After poll(): is the job hung (never without a timeout)?
  bool hung(double now) const;
  // One line per rank: where it is and what it waits for.
  std::vector<std::string> describe(double now) const;

  // What the last poll() found.
  const std::vector<heartbeat::Snapshot>& ranks() const { return ranks_; }
  bool any_rank_started() const { return !ranks_.empty(); }
  bool armed() const { return armed_at_ >= 0; }  // every rank has a heartbeat: the clock runs
  int world_size() const { return world_size_; }
  int ranks_present() const;
  int64_t iterations_done() const;  // the most any rank completed or loaded (0 before the first)
  // The iteration the ranks loaded (the most any reported; nullopt: none reached training).
  std::optional<int64_t> resumed_from() const;
  // The newest iteration any rank began (0: none): a failure in it, when past iterations_done().
  int64_t iteration_begun() const;
  bool reached_training() const;  // some rank finished its start-up in this attempt
  // The failure the ranks reported: the lowest rank's own words ("" if none).
  std::string reported_failure() const;
  bool failed_at_startup() const;  // a rank reported its failure before training started

 private:
  struct Seen {
    uint64_t progress = 0, alive = 0;
    double progress_at = 0, alive_at = 0;  // when they last moved
  };
  bool alive(size_t i, double now) const;

  std::string dir_;
  double timeout_s_;
  std::vector<heartbeat::Snapshot> ranks_;  // by rank, once present
  std::vector<Seen> seen_;
  int world_size_ = 0;
  double armed_at_ = -1;      // when every rank first had a heartbeat (-1: not yet)
  double progress_at_ = -1;   // the last time any rank progressed (or was busy and alive)
};

}  // namespace occ::cmd
