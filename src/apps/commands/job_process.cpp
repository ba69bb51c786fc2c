#include "apps/commands/job_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "apps/commands/launch_signals.h"
#include "core/error.h"

namespace occ::cmd {

pid_t spawn(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) fail("launch: cannot fork: {}", std::strerror(errno));
  if (pid == 0) {
    ::setpgid(0, 0);
    const int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, STDIN_FILENO);
    launch_signals::reset_in_child();
    // The supervisor killed outright (SIGKILL, which it cannot catch): the launcher
    // is told, and ends its ranks, rather than run on unsupervised.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() == 1) ::_exit(127);  // (it died before that call)
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "error: launch: cannot run %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // (also here: whichever runs first)
  return pid;
}

std::vector<pid_t> local_rank_pids(const std::vector<heartbeat::Snapshot>& ranks) {
  char host[64] = {};
  ::gethostname(host, sizeof host - 1);
  std::vector<pid_t> pids;
  for (const auto& s : ranks) {
    if (s.rank < 0 || s.pid <= 0 || s.host != host) continue;
    std::ifstream comm(fmt::format("/proc/{}/comm", s.pid));
    std::string name;
    std::error_code ec;  // (this binary under another name: a symlink to it)
    if ((std::getline(comm, name) && name == "optimus-cc") ||
        std::filesystem::equivalent(fmt::format("/proc/{}/exe", s.pid), "/proc/self/exe", ec))
      pids.push_back(pid_t(s.pid));
  }
  return pids;
}

bool process_running(pid_t pid) {
  // A zombie (exited, not reaped) counts as gone.
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

}  // namespace occ::cmd
