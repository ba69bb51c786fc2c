#include "parallel/param_gather.h"

#include <fmt/format.h>

#include "comm/ring_volume.h"
#include "core/error.h"

namespace occ {

OverlappedParamGather::OverlappedParamGather(const OptimizerShards& shards, HostMirror& params, MpiCommunicator& dp,
                                             TrafficCounters& job_counters, double timeout_s, Precision wire)
    : regions_(shards.regions()),
      owned_(shards.owned()),
      params_(params),
      wire_(wire),
      job_counters_(job_counters),
      copies_(params.device()) {
  for (const BufferSpan& r : regions_) {
    total_ = std::max(total_, r.offset + r.numel);
    round_bytes_ += ring_allgather_chunks_bytes(size_t(r.numel), dp.size(), dp.rank(), element_bytes(wire));
  }
  MPI_Comm dup;
  MPI_Comm_dup(dp.handle(), &dup);
  comm_ = std::make_unique<MpiCommunicator>(dup, own_counters_, timeout_s, "data-parallel (parameter all-gather)");
  thread_ = std::thread([this] { worker(); });
}

OverlappedParamGather::~OverlappedParamGather() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void OverlappedParamGather::start() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    OCC_CHECK(!in_flight_, "internal: a parameter all-gather started before the previous one was waited for");
    if (error_) std::rethrow_exception(error_);
  }
  // The chunks this rank updated; the ring fills in the rest. (Staged, the
  // download waits for the optimizer's kernels.)
  for (const BufferSpan& o : owned_) params_.download(size_t(o.offset), size_t(o.numel));
  own_counters_.reset();
  job_counters_.add(Traffic::DataParallel, round_bytes_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = 0;
    requested_ = in_flight_ = true;
  }
  cv_.notify_all();
}

double OverlappedParamGather::wait(int64_t offset, int64_t numel) {
  // Regions tile the buffer in order: those overlapping the range end with
  // the last one that begins before the range's end.
  size_t needed = 0;
  while (needed < regions_.size() && regions_[needed].offset < offset + numel) ++needed;
  std::unique_lock<std::mutex> lock(mu_);
  if (!in_flight_ && !error_) return 0.0;
  const double start = now_seconds();
  cv_.wait(lock, [&] { return error_ || !in_flight_ || done_ >= needed; });
  if (error_) std::rethrow_exception(error_);
  return now_seconds() - start;
}

bool OverlappedParamGather::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}

std::vector<TraceEvent> OverlappedParamGather::take_events() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::move(events_);
}

void OverlappedParamGather::worker() {
  bind_thread_to_device(params_.device());  // the uploads run on the stage's GPU
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || requested_; });
      if (stop_) return;
      requested_ = false;
    }
    try {
      for (size_t i = 0; i < regions_.size(); ++i) {
        const double start = now_seconds();
        const size_t begin = size_t(regions_[i].offset), n = size_t(regions_[i].numel);
        allgather_owned_chunks(*comm_, params_.host() + begin, n, wire_, wire_values_, Traffic::DataParallel);
        params_.upload(begin, n, copies_);
        {
          std::lock_guard<std::mutex> lock(mu_);
          done_ = i + 1;
          events_.push_back({fmt::format("dp_allgather parameters region {} ({} floats)", i, n), start, now_seconds(), 2});
        }
        cv_.notify_all();
      }
      OCC_CHECK(own_counters_[Traffic::DataParallel] == round_bytes_,
                "internal: the parameter all-gather sent {} bytes, the ring's volume is {}",
                own_counters_[Traffic::DataParallel], round_bytes_);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      in_flight_ = false;
    }
    cv_.notify_all();
  }
}

}  // namespace occ
