#pragma once
// When a run stops early and cleanly (Megatron's --exit-signal-handler,
// --exit-interval, --exit-duration-in-mins): after an iteration, every rank
// agrees whether to stop, so they all save the same checkpoint and exit 0, and
// the same command restarted with --load continues exactly.
//
// Signals: SIGTERM (what a scheduler sends each task) and SIGUSR1 (what mpirun
// forwards to every rank; mpirun turns its own SIGTERM into a SIGKILL of the
// ranks after a few seconds, so send mpirun SIGUSR1). The handler only sets a
// flag; the ranks agree on it after the current iteration. A second signal
// ends the process at once (exit status 128 + signal).
#include <cstdint>
#include <string>

#include "comm/communicator.h"

namespace occ {

struct ExitOptions {
  bool signal_handler = false;    // --exit-signal-handler
  int64_t interval = 0;           // --exit-interval N: stop after an iteration divisible by N (0: off)
  double duration_mins = 0.0;     // --exit-duration-in-mins M: stop once M minutes have passed (0: off)
};

class ExitControl {
 public:
  // Installs the signal handlers when options.signal_handler (one ExitControl per process).
  explicit ExitControl(const ExitOptions& options);
  ~ExitControl();
  ExitControl(const ExitControl&) = delete;
  ExitControl& operator=(const ExitControl&) = delete;

  // Collective over `world` (a small all-reduce) when a signal or the duration
  // can stop the run, else local: why the run stops after `iteration` ("" to
  // go on), the same on every rank. `elapsed_s`: this rank's seconds since the start.
  std::string stop_reason(Communicator& world, int64_t iteration, double elapsed_s);

  // The signal received so far (0: none); for tests and messages.
  static int received_signal();

 private:
  ExitOptions opt_;
};

}  // namespace occ
