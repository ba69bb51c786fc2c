#pragma once
// The processes of a job `optimus-cc launch` runs (apps/commands/launch.cpp).
#include <sys/types.h>

#include <string>
#include <vector>

#include "core/heartbeat.h"

namespace occ::cmd {

// Runs argv in a process group of its own (so that a terminal's Ctrl-C reaches
// only the supervisor, which stops the job gracefully), stdin from /dev/null
// (mpirun in a background group must not read the terminal), the supervisor's
// signal handlers reset, and SIGTERM when the supervisor dies (even of SIGKILL).
pid_t spawn(const std::vector<std::string>& argv);
// The processes of ranks on this host, from their heartbeats (still optimus-cc: pids are reused).
std::vector<pid_t> local_rank_pids(const std::vector<heartbeat::Snapshot>& ranks);
// Running (a zombie, exited but not reaped, counts as gone).
bool process_running(pid_t pid);

}  // namespace occ::cmd
