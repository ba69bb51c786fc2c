#pragma once
// PowerSGD on data-parallel gradients (Vogels et al.) with Optimus-CC's
// selective stage compression (SC): every gradient of 2+ dimensions (viewed
// as shape[0] x rest) is compressed; all P's are summed in one all-reduce,
// orthonormalised, all Q's computed and summed in a second one, divided by DP;
// the update uses P Q^T. Error feedback keeps each rank's M - P Q^T. 1-D
// gradients are not handled here (the bucketed reducer all-reduces them).
// SC: only stages s < K compress (--selective-grad-comp-way K); the others'
// DP all-reduce hides behind the earlier stages' epilogue.
#include <vector>

#include "comm/mpi_communicator.h"
#include "core/tensor_desc.h"
#include "core/tensor_file.h"
#include "core/timer.h"

namespace occ {

struct GradCompressionConfig {
  bool enabled = false;         // --grad-comp
  int rank = 128;               // --grad-comp-rank
  float warmup_fraction = 0.0f; // --grad-comp-warm-up: first fraction of iterations uncompressed
  int selective_way = -1;       // --selective-grad-comp-way K (-1: every stage)
  bool error_feedback = false;  // --use-error-feedback

  // Does stage `stage` compress its DP gradients at all?
  bool stage_compresses(int stage) const { return enabled && (selective_way < 0 || stage < selective_way); }
};

class DataParallelPowerSgd {
 public:
  // tensors: the gradients to compress as rows x cols matrices (offsets into
  // the grad buffer); each one's key seeds its Q, alike on every DP rank.
  DataParallelPowerSgd(const GradCompressionConfig& cfg, std::vector<TensorDesc> tensors, uint64_t seed);
  const std::vector<TensorDesc>& tensors() const { return tensors_; }
  // Averages the selected gradients over dp (compressed) in place.
  void reduce(float* grads, MpiCommunicator& dp, PhaseTimers& timers);
  // Floats each all-reduce carries: sum of rows*k and of cols*k.
  int64_t p_floats() const { return p_total_; }
  int64_t q_floats() const { return q_total_; }
  void save_state(TensorFileWriter& w) const;
  bool load_state(const TensorFileReader& r);

 private:
  struct Slot {
    int64_t offset, n, m, k, p_off, q_off;
  };
  GradCompressionConfig cfg_;
  std::vector<TensorDesc> tensors_;
  std::vector<Slot> slots_;
  std::vector<std::vector<float>> q_, error_;  // warm starts, residuals
  std::vector<float> p_buf_, q_buf_, work_;
  int64_t p_total_ = 0, q_total_ = 0;
};

}  // namespace occ
