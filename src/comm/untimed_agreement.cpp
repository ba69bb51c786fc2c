#include "comm/untimed_agreement.h"

#include <sched.h>
#include <time.h>

#include <algorithm>

#include "core/heartbeat.h"
#include "core/timer.h"

namespace occ {

void allreduce_max_untimed(MpiCommunicator& comm, float* data, size_t count, Traffic traffic,
                           const std::function<void()>& while_waiting) {
  if (comm.size() == 1 || count == 0) return;
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Iallreduce(MPI_IN_PLACE, data, int(count), MPI_FLOAT, MPI_MAX, comm.handle(), &request);
  comm.counters().add(traffic, ring_allreduce_bytes(count, comm.size(), comm.rank(), sizeof(float)));
  heartbeat::begin_wait("an agreement (no timeout)", comm.name(), -1);
  double next_report = now_seconds() + 0.5;
  for (int polls = 0;; ++polls) {
    int done = 0;
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) break;
    if (polls < 32) {
      sched_yield();
      continue;
    }
    // Back off up to 1 ms: such a wait lasts seconds or more, and the core goes to the writers.
    timespec ts{0, std::min<long>(1'000'000, 2'000L * (polls - 31))};
    nanosleep(&ts, nullptr);
    if (while_waiting && now_seconds() >= next_report) {
      while_waiting();
      next_report = now_seconds() + 0.5;
    }
  }
  heartbeat::end_wait();
}

}  // namespace occ
