#include "train/exit_control.h"

#include <unistd.h>

#include <csignal>
#include <cstring>
#include <string>

#include "core/error.h"
#include "train/exit_signals.h"

namespace occ {

namespace {

volatile std::sig_atomic_t g_signal = 0;
struct sigaction g_previous_term, g_previous_usr1;
bool g_installed = false;

extern "C" void on_exit_signal(int sig) {
  if (g_signal != 0) {
    // The second signal: stop now (async-signal-safe calls only).
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
