#pragma once
// Latency added in the transport between emulated nodes, where the kernel has
// no netem to add it on the links (scripts/cluster.sh run --latency D exports
// OCC_EMULATED_LATENCY=D to every rank). A message from a rank to a rank of
// another node is handed to MPI no earlier than its send time + D, by one
// delay line per process (comm/delay_line.h); within a node nothing changes.
// The MPI communicator's point-to-point messages and its ring collectives
// (which are point-to-point messages) all go through it, and so do the
// host-staged paths built on it. docs/emulated-cluster.md: "Latency".
#include <mpi.h>

#include <chrono>
#include <string>

#include "comm/delay_line.h"

namespace occ {

constexpr const char* kEmulatedLatencyVariable = "OCC_EMULATED_LATENCY";

// The latency the environment asks for (0 when the variable is unset or
// empty). Throws occ::Error for a value that is not a time.
std::chrono::nanoseconds emulated_latency_from_env();

// Collective over `world` (every rank passes the same delay): from now on,
// messages between ranks of different nodes (MPI's shared-memory split:
// ranks that share no memory) wait `delay`. Returns the number of nodes (with
// one, nothing is delayed and emulated_latency() stays 0).
int configure_emulated_latency(MPI_Comm world, std::chrono::nanoseconds delay);
// The configured delay (0: off, the plain path).
std::chrono::nanoseconds emulated_latency();
// Are these two world ranks on different nodes? (false while latency is off)
bool on_different_nodes(int world_rank_a, int world_rank_b);
// The process's delay line (its thread starts with the first delayed message).
DelayLine& emulated_latency_line();
// Before MPI_Finalize: every delayed message has been handed to MPI, and the
// line's thread has ended.
void stop_emulated_latency();

}  // namespace occ
