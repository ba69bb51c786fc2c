#pragma once
// The signal handlers of --exit-signal-handler (train/exit_control.h), which a
// process installs first thing, before its start-up work (MPI's, the data
// indices', the checkpoint's load): a stop signal then is recorded and honoured
// after the first iteration instead of killing the rank, so `optimus-cc launch`
// may pass a scheduler's SIGTERM on at once.
namespace occ {

// The command line asks for --exit-signal-handler (as `optimus-cc launch`
// does), read before the flags are parsed.
bool exit_signal_handler_asked(int argc, char** argv);
// Installs the handlers (once); a signal recorded since stays recorded for
// ExitControl, which removes them when its options turn the handler off.
void install_exit_signal_handlers();

}  // namespace occ
