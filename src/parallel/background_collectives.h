#pragma once
// Collectives that run beside the training on a thread of their own, on a
// communicator of their own (DiLoCo's outer all-reduce overlapping the next
// inner steps: train/diloco.h). The main thread queues a job and later waits
// for it; jobs run in the order queued, which every rank of the group keeps,
// so the collectives match. Each job's bytes are counted on this object's own
// counters and handed to the waiter, who reports them in the iteration it
// chooses (the main thread resets the job's counters every iteration, and a
// job may span several). A group of one rank runs its jobs at once, inline.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "comm/mpi_communicator.h"

namespace occ {

class BackgroundCollectives {
 public:
  // Duplicates `group` (collective over it): the jobs never interleave with
  // the group's other traffic.
  BackgroundCollectives(const MpiCommunicator& group, double timeout_s, const std::string& name);
  ~BackgroundCollectives();  // waits for the jobs queued
  BackgroundCollectives(const BackgroundCollectives&) = delete;
  BackgroundCollectives& operator=(const BackgroundCollectives&) = delete;

  int size() const { return comm_->size(); }
  int rank() const { return comm_->rank(); }

  struct Done {
    double start = 0, end = 0;  // when the collective ran (steady clock seconds)
    uint64_t bytes = 0;         // this rank put on the wire
  };
  using Ticket = uint64_t;
  // In-place ring all-reduce (sum) of data[0, count); data must stay put until waited for.
  Ticket allreduce_sum(float* data, size_t count);
  // out[size() * count] = every rank's in[count], in rank order (ring all-gather).
  Ticket allgather(const float* in, float* out, size_t count);
  // Blocks until the job is done (jobs finish in order).
  Done wait(Ticket ticket);
  // Is it done? Never blocks.
  bool done(Ticket ticket);

 private:
  struct Job {
    Ticket ticket;
    float* data;
    const float* in;
    size_t count;
    bool gather;
  };
  Ticket submit(Job job);
  Done run(const Job& job);
  void worker();

  TrafficCounters counters_;  // only run() touches them: one job at a time
  std::unique_ptr<MpiCommunicator> comm_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  std::deque<std::pair<Ticket, Done>> finished_;
  Ticket next_ = 1, completed_ = 0;  // jobs < completed_ + 1 are done
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace occ
