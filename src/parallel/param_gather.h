#pragma once
// The distributed optimizer's all-gather of the updated parameters, overlapped
// with the next iteration's forward (Megatron's --overlap-param-gather).
// start(), after the optimizer step, copies this rank's updated chunks to the
// parameters' host view (staged: they live on a GPU) and hands the regions
// (OptimizerShards: the gradient buckets) to a thread of its own, which
// all-gathers them one after the other in buffer order -- the order in which
// forward first reads them: embedding, layers, head -- over its own handle of
// the DP group, and uploads each region once it is whole. wait() blocks until
// the regions that hold a range of the parameters have arrived: the model asks
// for each layer's range just before the layer reads it
// (GptStage::set_params_ready), so a bucket's gather runs while the layers
// below it compute. The values are the blocking all-gather's, bit for bit
// (the same ring over the same data), only later.
//
// Bytes: the thread counts what it sends on counters of its own; start() books
// the round's exact ring volume (comm/ring_volume.h) to the job's counters, so
// a metrics row carries the gather of its own iteration's update as without
// the overlap, and the thread checks its count against that volume at the end
// of the round (a mismatch is an error, not a silent difference).
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/mpi_communicator.h"
#include "core/host_staging.h"
#include "core/timer.h"
#include "parallel/optimizer_shards.h"

namespace occ {

class OverlappedParamGather {
 public:
  // Collective over the DP group `dp` (its handle is duplicated for the
  // thread). params: the parameters' host view, as the blocking gather uses
  // it; job_counters: where start() books the round's bytes. The MPI waits of
  // the thread give up after timeout_s and abort the job, as every wait does.
  // wire: the format the parameters travel in (OptimizerShards).
  OverlappedParamGather(const OptimizerShards& shards, HostMirror& params, MpiCommunicator& dp,
                        TrafficCounters& job_counters, double timeout_s, Precision wire = Precision::Fp32);
  ~OverlappedParamGather();
  OverlappedParamGather(const OverlappedParamGather&) = delete;
  OverlappedParamGather& operator=(const OverlappedParamGather&) = delete;

  // After the optimizer step (on the thread that ran it, with the previous
  // round complete): queues every region's all-gather.
  void start();
  // Blocks until every region that overlaps [offset, offset + numel) has been
  // gathered (and uploaded); returns the seconds it waited (0 when no round is
  // in flight). Rethrows a failure of the gather thread.
  double wait(int64_t offset, int64_t numel);
  // The whole round.
  double wait_all() { return wait(0, total_); }
  bool in_flight() const;
  // This rank's bytes of one round (the ring volume of every region).
  uint64_t round_bytes() const { return round_bytes_; }
  // The gather thread's timed regions since the last call (for the trace).
  std::vector<TraceEvent> take_events();

 private:
  void worker();

  std::vector<BufferSpan> regions_, owned_;  // regions in buffer order; this rank's chunk of each
  int64_t total_ = 0;
  HostMirror& params_;
  Precision wire_;
  std::vector<uint16_t> wire_values_;  // the thread's region in 16 bits while it travels
  TrafficCounters& job_counters_;
  TrafficCounters own_counters_;  // what the thread's communicator sends
  std::unique_ptr<MpiCommunicator> comm_;
  CopyQueue copies_;  // the thread's uploads, beside the compute
  uint64_t round_bytes_ = 0;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool requested_ = false, in_flight_ = false, stop_ = false;
  size_t done_ = 0;  // regions of the round gathered
  std::exception_ptr error_;
  std::vector<TraceEvent> events_;
  std::thread thread_;
};

}  // namespace occ
