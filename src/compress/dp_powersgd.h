#pragma once
// PowerSGD on data-parallel gradients (Vogels et al.) with Optimus-CC's
// selective stage compression (SC, see dp_compressor.h): every selected
// gradient is compressed; all P's are summed in one all-reduce,
// orthonormalised, all Q's computed and summed in a second one, divided by DP;
// the update uses P Q^T. Error feedback keeps each rank's M - P Q^T.
// Everything runs on the gradients' device (kernels/ops.h: cuBLAS and a
// Gram-Schmidt kernel on a GPU, OpenBLAS and LAPACK on the CPU), the factors
// all-reduced where they are; only a checkpoint moves its state to the host.
#include <vector>

#include "compress/dp_compressor.h"
#include "core/buffer.h"

namespace occ {

class DataParallelPowerSgd final : public DataParallelCompressor {
 public:
  // tensors: the gradients to compress as rows x cols matrices (offsets into
  // the grad buffer); each one's key seeds its Q, alike on every DP rank.
  // ops: the gradients' backend, where its state lives and it computes.
  DataParallelPowerSgd(const GradCompressionConfig& cfg, std::vector<TensorDesc> tensors, uint64_t seed,
                       kernels::Ops& ops);
  const std::vector<TensorDesc>& tensors() const override { return tensors_; }
  // Averages the selected gradients (on ops' device) over dp.device, compressed, in place.
  void reduce(float* grads, DataParallelGroup dp, PhaseTimers& timers) override;
  // Floats each all-reduce carries: sum of rows*k and of cols*k.
  int64_t p_floats() const { return p_total_; }
  int64_t q_floats() const { return q_total_; }
  bool stateful() const override { return true; }  // the warm-started Q's
  void save_state(TensorFileWriter& w) const override;
  bool load_state(const TensorFileReader& r) override;
 private:
  struct Slot {
    int64_t offset, n, m, k, p_off, q_off;
  };
  GradCompressionConfig cfg_;
  std::vector<TensorDesc> tensors_;
  kernels::Ops& ops_;
  std::vector<Slot> slots_;
  std::vector<DeviceBuffer<float>> q_, error_;  // warm starts, residuals
  DeviceBuffer<float> p_buf_, q_buf_, work_;
  int64_t p_total_ = 0, q_total_ = 0;
};

}  // namespace occ
