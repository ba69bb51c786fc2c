#pragma once
// The staging directory of the checkpoint save in flight, for the immediate
// exit of a second stop signal (train/exit_control.h): it removes that
// directory before the process ends, so that a stop at once leaves no
// half-written ROOT/iter_NNNNNNN.tmp behind and the previous checkpoint stays
// the latest. Every rank registers it (every rank receives the signal, and any
// may remove it; a rank's write into it then fails, unseen).
#include <string>

namespace occ {

// Registers `staging` when a save begins; "" once it is committed or given up.
// (Implemented in exit_control.cpp, beside the signal handler that reads it.)
void set_save_in_flight(const std::string& staging);

}  // namespace occ
