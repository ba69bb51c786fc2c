#pragma once
// Compressed averaging of data-parallel gradients (--grad-comp), whatever the
// method: PowerSGD all-reduces its low-rank factors (dp_powersgd.h); the byte
// methods (int8, fp8, topk, sign), whose wires cannot be summed, all-gather
// the encoded gradients and decode and sum them in rank order
// (dp_gather_compression.h). Both take the matrices (2+ dimensions, viewed as
// shape[0] x rest) of the stages SC selects; 1-D gradients stay in the
// bucketed all-reduce.
// SC: only stages s < K compress (--selective-grad-comp-way K); the others'
// DP all-reduce hides behind the earlier stages' epilogue.
#include <memory>
#include <vector>

#include "comm/mpi_communicator.h"
#include "compress/compressor_factory.h"
#include "core/tensor_desc.h"
#include "core/tensor_file.h"
#include "core/timer.h"
#include "core/wire_format.h"
#include "kernels/ops.h"

namespace occ {

struct GradCompressionConfig {
  bool enabled = false;         // --grad-comp
  int rank = 128;               // --grad-comp-rank
  float warmup_fraction = 0.0f; // --grad-comp-warm-up: first fraction of iterations uncompressed
  int selective_way = -1;       // --selective-grad-comp-way K (-1: every stage)
  bool error_feedback = false;  // --use-error-feedback
  CompressionMethod method = CompressionMethod::PowerSgd;  // --grad-comp-method
  double topk_fraction = 0.01;  // --grad-comp-topk-fraction
  double topk_density = 0.02;   // --grad-comp-topk-density (topk2)
  bool stochastic = false;      // --grad-comp-rounding stochastic (block methods)
  int rotation = 0;             // --grad-comp-rotation hadamard:B (block methods; 0: none)
  double high_fraction = kDefaultHighFraction;  // --grad-comp-adaptive-high-fraction (adaptive)

  // Does stage `stage` compress its DP gradients at all?
  bool stage_compresses(int stage) const { return enabled && (selective_way < 0 || stage < selective_way); }
  CompressorSpec spec() const {
    CompressorSpec s{method, rank, topk_fraction, stochastic, rotation};
    s.topk_density = topk_density;  // (by name: a positional list mixed two methods' fields up once)
    s.high_fraction = high_fraction;
    return s;
  }
};

// The DP group as a compressor sees it: `host` moves host memory (MPI, its
// bytes counted on its counters); `device` is the same ranks for data on the
// gradients' device (NCCL, or MPI through host copies; `host` itself on the
// CPU), counting on the same counters. `wire`: the format the gradients
// travel in uncompressed (core/wire_format.h; fp32, or bf16 with
// --grad-reduce-in-bf16), against which a compressor counts what it saves
// (TrafficCounters::add_saved): the dense ring's 2 (D-1)/D values per rank of
// wire_value_bytes(wire) each, minus the bytes it sent.
struct DataParallelGroup {
  MpiCommunicator& host;
  Communicator& device;
  Precision wire = Precision::Fp32;
};

class DataParallelCompressor {
 public:
  virtual ~DataParallelCompressor() = default;
  // The gradients it compresses (offsets into the grad buffer).
  virtual const std::vector<TensorDesc>& tensors() const = 0;
  // Averages the selected gradients, on their device, over the group
  // (compressed) in place: PowerSGD's factors are all-reduced and the byte
  // methods' messages all-gathered over dp.device. Every DP rank ends with the
  // same values.
  virtual void reduce(float* grads, DataParallelGroup dp, PhaseTimers& timers) = 0;
  // The iteration whose gradients the next reduce() averages: it keys a
  // rotation's signs (alike on every DP rank, and again after a resume).
  virtual void begin_iteration(int64_t /*iteration*/) {}
  // Does it keep state a checkpoint must hold (warm starts, residuals)?
  virtual bool stateful() const = 0;
  virtual void save_state(TensorFileWriter& w) const = 0;
  // Loads what fits; false unless that was all of its state.
  virtual bool load_state(const TensorFileReader& r) = 0;
};

// The compressor of the config's method; each tensor's key seeds its state
// alike on every DP rank. ops: the backend of the gradients' device.
std::unique_ptr<DataParallelCompressor> make_dp_compressor(const GradCompressionConfig& cfg,
                                                           std::vector<TensorDesc> tensors, uint64_t seed,
                                                           kernels::Ops& ops);

}  // namespace occ
