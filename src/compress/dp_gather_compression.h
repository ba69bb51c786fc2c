#pragma once
// Data-parallel averaging with a byte-wire compressor (int8, fp8, topk, sign;
// see dp_compressor.h). Such wires cannot be summed on the way, so each rank
// encodes its gradients (with error feedback under --grad-comp-error-feedback
// or --use-error-feedback) into
// one message, the DP group all-gathers the messages (a ring: each rank sends
// (D - 1) x message bytes), and every rank decodes all D of them and sums them
// in rank order: the same floats in the same order on every rank, so the
// ranks' averages are identical. Per rank this sends (D - 1) W bytes for a
// W-byte message, against 2 (D - 1) / D x 4 N for a dense ring all-reduce of
// N floats: int8 at D = 2 sends ~1/4 of the dense bytes; gathering loses to
// a reduction as D grows (the message count grows with D), which the planner
// accounts for.
// It runs on the gradients' device (with its error feedback), the messages
// gathered over the device group (NCCL, or MPI through host copies).
#include <memory>
#include <vector>

#include "compress/dp_compressor.h"

namespace occ {

class DataParallelGatherCompression final : public DataParallelCompressor {
 public:
  // ops: the gradients' backend, where it computes.
  DataParallelGatherCompression(const GradCompressionConfig& cfg, std::vector<TensorDesc> tensors, uint64_t seed,
                                kernels::Ops& ops);
  const std::vector<TensorDesc>& tensors() const override { return tensors_; }
  void reduce(float* grads, DataParallelGroup group, PhaseTimers& timers) override;
  void begin_iteration(int64_t iteration) override { iteration_ = iteration; }
  bool stateful() const override { return cfg_.error_feedback; }  // the residuals
  void save_state(TensorFileWriter& w) const override;
  bool load_state(const TensorFileReader& r) override;
  // Floats of this rank's message (all tensors' wires, concatenated).
  int64_t wire_floats() const { return wire_total_; }

 private:
  // "dp/METHOD/TENSOR/": the method in the name, so DP PowerSGD's residuals
  // ("dp/TENSOR/error") or another method's are never loaded as this one's.
  std::string state_prefix(size_t i) const;
  GradCompressionConfig cfg_;
  std::vector<TensorDesc> tensors_;
  std::vector<std::unique_ptr<MatrixCompressor>> compressors_;  // per tensor (error feedback inside)
  std::vector<int64_t> wire_offset_;                            // per tensor, into the message
  int64_t wire_total_ = 0;
  int64_t iteration_ = 0;  // keys a rotation (begin_iteration)
  kernels::Ops& ops_;  // where the buffers below live and the sums run
  DeviceBuffer<float> message_, gathered_, decoded_;
};

}  // namespace occ
