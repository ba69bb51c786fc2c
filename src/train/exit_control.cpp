#include "train/exit_control.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/error.h"
#include "train/exit_signals.h"
#include "train/save_in_flight.h"

namespace occ {

namespace {

volatile std::sig_atomic_t g_signal = 0;
struct sigaction g_previous_term, g_previous_usr1;
bool g_installed = false;

// The save in flight's staging directory, for the handler: the path is written
// while g_staging_set is 0, then published.
char g_staging[4096];
volatile std::sig_atomic_t g_staging_set = 0;

// Removes `name` under directory fd `parent` and everything below it, `depth`
// levels deep at most (a staging directory holds shard directories of files),
// with async-signal-safe calls only (openat, getdents64, unlinkat).
void remove_tree_now(int parent, const char* name, int depth) {
  if (unlinkat(parent, name, 0) == 0 || errno == ENOENT) return;  // a file (or gone)
  if (depth == 0) return;
  const int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  struct Entry {  // linux_dirent64
    uint64_t ino;
    int64_t off;
    unsigned short reclen;
    unsigned char type;
    char name[1];
  };
  alignas(8) char buffer[4096];
  for (long n; (n = syscall(SYS_getdents64, fd, buffer, sizeof buffer)) > 0;)
    for (long at = 0; at < n;) {
      const Entry* e = reinterpret_cast<const Entry*>(buffer + at);
      at += e->reclen;
      if (std::strcmp(e->name, ".") != 0 && std::strcmp(e->name, "..") != 0) remove_tree_now(fd, e->name, depth - 1);
    }
  close(fd);
  unlinkat(parent, name, AT_REMOVEDIR);
}

extern "C" void on_exit_signal(int sig) {
  if (g_signal != 0) {
    // The second signal: stop now (async-signal-safe calls only), without the save in flight.
    // A writer thread may still add a file meanwhile: tried again until the directory is gone.
    const int saved_errno = errno;
    for (int attempt = 0; g_staging_set && attempt < 20; ++attempt) {
      remove_tree_now(AT_FDCWD, g_staging, 3);
      if (access(g_staging, F_OK) != 0) break;
    }
    errno = saved_errno;
    static const char kMsg[] = "error: a second signal: exiting at once, without a checkpoint\n";
    ssize_t ignored = write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
    (void)ignored;
    _exit(128 + sig);
  }
  g_signal = sig;
}

}  // namespace

bool exit_signal_handler_asked(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--exit-signal-handler" || a == "--exit-signal-handler=true" || a == "--exit-signal-handler=1") return true;
  }
  return false;
}

void install_exit_signal_handlers() {
  // Set again when called again (ExitControl, after MPI's start-up, which may set its own):
  // the previous ones are those from before the first call.
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_exit_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking calls go on; the flag is read between iterations
  sigaction(SIGTERM, &sa, g_installed ? nullptr : &g_previous_term);
  sigaction(SIGUSR1, &sa, g_installed ? nullptr : &g_previous_usr1);
  g_installed = true;
}

namespace {
void remove_signal_handlers() {
  if (!g_installed) return;
  g_installed = false;
  sigaction(SIGTERM, &g_previous_term, nullptr);
  sigaction(SIGUSR1, &g_previous_usr1, nullptr);
}
}  // namespace

ExitControl::ExitControl(const ExitOptions& options) : opt_(options) {
  if (opt_.signal_handler) install_exit_signal_handlers();
  else remove_signal_handlers();  // (asked for on the command line, then turned off, e.g. =false after it)
}

ExitControl::~ExitControl() { remove_signal_handlers(); }

int ExitControl::received_signal() { return int(g_signal); }

void set_save_in_flight(const std::string& staging) {
  g_staging_set = 0;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  if (staging.empty() || staging.size() >= sizeof g_staging) return;  // (a path too long stays: rare, and harmless)
  std::memcpy(g_staging, staging.c_str(), staging.size() + 1);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  g_staging_set = 1;
}

std::string ExitControl::stop_reason(Communicator& world, int64_t iteration, double elapsed_s) {
  std::string reason;
  if (opt_.signal_handler || opt_.duration_mins > 0) {
    // [a signal arrived, this rank's elapsed minutes]: the max over ranks decides for all.
    float flags[2] = {g_signal != 0 ? float(g_signal) : 0.0f, float(elapsed_s / 60.0)};
    world.allreduce_max(flags, 2, Traffic::Other);
    if (flags[0] > 0) reason = fmt::format("signal {} ({}) received", int(flags[0]), strsignal(int(flags[0])));
    else if (opt_.duration_mins > 0 && flags[1] >= opt_.duration_mins)
      reason = fmt::format("--exit-duration-in-mins {:g} reached ({:.2f} min)", opt_.duration_mins, flags[1]);
  }
  if (reason.empty() && opt_.interval > 0 && iteration % opt_.interval == 0)
    reason = fmt::format("--exit-interval {} reached", opt_.interval);
  return reason;
}

}  // namespace occ
