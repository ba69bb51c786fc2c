#include "apps/commands/launch_signals.h"

#include <signal.h>

#include <atomic>
#include <csignal>

namespace occ::cmd::launch_signals {

namespace {

constexpr int kGraceful[] = {SIGTERM, SIGINT, SIGUSR1, SIGHUP};
constexpr int kAtOnce[] = {SIGQUIT};
// Those that would end the supervisor: the job goes with it.
constexpr int kFatal[] = {SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF, SIGXCPU, SIGXFSZ, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT,
                          SIGTRAP, SIGSYS};

volatile std::sig_atomic_t g_graceful = 0, g_last_graceful = 0, g_at_once = 0;
// Read by the fatal handler: lock-free atomics only.
std::atomic<pid_t> g_job_group{0};
constexpr int kMaxRanks = 256;
std::atomic<pid_t> g_ranks[kMaxRanks];
std::atomic<int> g_rank_count{0};

extern "C" void on_graceful(int sig) {
  g_last_graceful = sig;
  g_graceful = g_graceful + 1;
}

extern "C" void on_at_once(int sig) { g_at_once = sig; }

extern "C" void on_fatal(int sig) {
  kill_watched();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void set(int sig, void (*handler)(int), int flags) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = flags;
  ::sigaction(sig, &sa, nullptr);
}

}  // namespace

void install() {
  for (int sig : kGraceful) set(sig, on_graceful, SA_RESTART);
  for (int sig : kAtOnce) set(sig, on_at_once, SA_RESTART);
  for (int sig : kFatal) set(sig, on_fatal, SA_RESETHAND);
  set(SIGPIPE, SIG_IGN, 0);
}

void reset_in_child() {
  for (int sig : kGraceful) set(sig, SIG_DFL, 0);
  for (int sig : kAtOnce) set(sig, SIG_DFL, 0);
  for (int sig : kFatal) set(sig, SIG_DFL, 0);
  set(SIGPIPE, SIG_DFL, 0);  // (an ignored signal stays ignored across exec)
}

int graceful_count() { return int(g_graceful); }
int last_graceful() { return int(g_last_graceful); }
int at_once() { return int(g_at_once); }

void watch_job(pid_t process_group) { g_job_group.store(process_group); }

void watch_ranks(const std::vector<pid_t>& pids) {
  const int n = int(pids.size() < size_t(kMaxRanks) ? pids.size() : size_t(kMaxRanks));
  g_rank_count.store(0);
  for (int i = 0; i < n; ++i) g_ranks[i].store(pids[size_t(i)]);
  g_rank_count.store(n);
}

void kill_watched() {
  const int n = g_rank_count.load();
  for (int i = 0; i < n; ++i)
    if (const pid_t pid = g_ranks[i].load(); pid > 0) ::kill(pid, SIGKILL);
  if (const pid_t group = g_job_group.load(); group > 0) ::kill(-group, SIGKILL);
}

}  // namespace occ::cmd::launch_signals
