#pragma once
// An agreement that waits as long as it takes: an in-place max over a group
// with no --comm-timeout, for the collective after local work of unbounded
// length (a checkpoint write of many GB on a network file system) that some
// ranks reach long before others. The waiting ranks are to be inside a
// heartbeat Busy scope of their caller's (the supervisor's hang detection does
// not count busy time). A rank that dies still ends the wait: Open MPI's
// runtime ends every rank of the job when one dies; one that stops (SIGSTOP)
// is the supervisor's to find, its heartbeat's liveness stops.
//
// Every other collective of MpiCommunicator gives up after --comm-timeout
// (comm/mpi_communicator.h): a peer that is late there has failed.
#include <cstddef>
#include <functional>

#include "comm/mpi_communicator.h"

namespace occ {

// data[count] = the max over comm's ranks (a nonblocking MPI all-reduce, polled
// with back-off sleeps); counted as the ring all-reduce of count floats.
// while_waiting (optional) runs about twice a second while the wait lasts.
void allreduce_max_untimed(MpiCommunicator& comm, float* data, size_t count, Traffic traffic,
                           const std::function<void()>& while_waiting = {});

}  // namespace occ
