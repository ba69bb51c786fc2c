#pragma once
// The signals of `optimus-cc launch` (apps/commands/launch.cpp). No signal that
// can be caught leaves the job running unsupervised:
//  - SIGTERM, SIGINT, SIGUSR1 and SIGHUP (a closed ssh session) ask for the
//    job's graceful stop: each becomes one SIGUSR1 to the launcher (the ranks'
//    --exit-signal-handler: a checkpoint, exit 0; a second one, at once);
//  - SIGQUIT asks to end the job at once (no checkpoint; the supervisor exits
//    non-zero);
//  - a fatal one (SIGSEGV, SIGABRT, SIGALRM, SIGUSR2, ...) kills the job's
//    process group and its ranks on this host before the supervisor dies of it;
//  - SIGPIPE is ignored (a closed terminal must not end the supervisor: its
//    output is then lost, not its job).
#include <sys/types.h>

#include <vector>

namespace occ::cmd::launch_signals {

void install();
// Before exec in the job's child: the default actions back.
void reset_in_child();

int graceful_count();  // stop signals received so far asking for a graceful stop
int last_graceful();   // the last of them (0: none)
int at_once();         // a signal asking to end the job at once (0: none)

// What a fatal signal must end: the job's process group and its ranks on this
// host (pid 0 / empty: none).
void watch_job(pid_t process_group);
void watch_ranks(const std::vector<pid_t>& pids);
// Kills what is watched (SIGKILL); async-signal-safe.
void kill_watched();

}  // namespace occ::cmd::launch_signals
