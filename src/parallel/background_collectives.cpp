#include "parallel/background_collectives.h"

#include "core/error.h"
#include "core/timer.h"

namespace occ {

BackgroundCollectives::BackgroundCollectives(const MpiCommunicator& group, double timeout_s, const std::string& name) {
  MPI_Comm dup;
  MPI_Comm_dup(group.handle(), &dup);
  comm_ = std::make_unique<MpiCommunicator>(dup, counters_, timeout_s, name);
  if (comm_->size() > 1) thread_ = std::thread([this] { worker(); });
}

BackgroundCollectives::~BackgroundCollectives() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    // Every rank queued the same jobs: finish them, so no peer waits on a ring step that never comes.
    cv_.wait(lock, [&] { return queue_.empty() || !thread_.joinable(); });
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

BackgroundCollectives::Done BackgroundCollectives::run(const Job& job) {
  Done d;
  const uint64_t before = counters_[Traffic::DataParallel];
  d.start = now_seconds();
  if (job.gather)
    comm_->allgather(job.in, job.data, job.count, Traffic::DataParallel);
  else
    comm_->allreduce_sum(job.data, job.count, Traffic::DataParallel);
  d.end = now_seconds();
  d.bytes = counters_[Traffic::DataParallel] - before;
  return d;
}

BackgroundCollectives::Ticket BackgroundCollectives::submit(Job job) {
  std::unique_lock<std::mutex> lock(mu_);
  job.ticket = next_++;
  if (!thread_.joinable()) {  // one rank: nothing to wait for
    const Done d = run(job);
    finished_.emplace_back(job.ticket, d);
    completed_ = job.ticket;
    return job.ticket;
  }
  queue_.push_back(job);
  lock.unlock();
  cv_.notify_all();
  return job.ticket;
}

BackgroundCollectives::Ticket BackgroundCollectives::allreduce_sum(float* data, size_t count) {
  return submit({0, data, nullptr, count, false});
}

BackgroundCollectives::Ticket BackgroundCollectives::allgather(const float* in, float* out, size_t count) {
  return submit({0, out, in, count, true});
}

BackgroundCollectives::Done BackgroundCollectives::wait(Ticket ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  OCC_CHECK(ticket >= 1 && ticket < next_, "internal: waiting for background collective {} that was never queued",
            ticket);
  cv_.wait(lock, [&] { return completed_ >= ticket; });
  for (auto it = finished_.begin(); it != finished_.end(); ++it)
    if (it->first == ticket) {
      const Done d = it->second;
      finished_.erase(it);
      return d;
    }
  fail("internal: background collective {} was waited for twice", ticket);
}

bool BackgroundCollectives::done(Ticket ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_ >= ticket;
}

void BackgroundCollectives::worker() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      job = queue_.front();
    }
    const Done d = run(job);
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.pop_front();
      finished_.emplace_back(job.ticket, d);
      completed_ = job.ticket;
    }
    cv_.notify_all();
  }
}

}  // namespace occ
