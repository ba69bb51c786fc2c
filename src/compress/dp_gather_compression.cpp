#include "compress/dp_gather_compression.h"
#include "compress/error_feedback.h"

#include <fmt/format.h>

#include "compress/powersgd.h"
#include "core/error.h"
#include "core/rng.h"

namespace occ {

DataParallelGatherCompression::DataParallelGatherCompression(const GradCompressionConfig& cfg,
                                                             std::vector<TensorDesc> tensors, uint64_t seed,
                                                             kernels::Ops& ops)
    : cfg_(cfg),
      tensors_(std::move(tensors)),
      ops_(ops),
      message_(ops_.device()),
      gathered_(ops_.device()),
      decoded_(ops_.device()) {
  OCC_CHECK(!method_is_summable(cfg.method), "DataParallelGatherCompression is for byte-wire methods, not {}",
            method_name(cfg.method));
  for (const auto& t : tensors_) {
    auto c = make_compressor(cfg.spec(), t.rows, t.cols, seed, t.key + 1, CompressorPlacement{&ops_});
    if (cfg.error_feedback) c = std::make_unique<ErrorFeedback>(std::move(c), ops_);
    wire_offset_.push_back(wire_total_);
    wire_total_ += c->wire_floats();
    compressors_.push_back(std::move(c));
  }
  message_.resize(size_t(wire_total_));
}

void DataParallelGatherCompression::reduce(float* grads, DataParallelGroup group, PhaseTimers& timers) {
  MpiCommunicator& dp = group.host;
  const int64_t D = dp.size();
  {
    ScopedPhase t(timers, "compress");
    // A rotation is keyed by the iteration, alike on every rank (it then decodes
    // every rank's message). Unrotated methods keep their keys (seed and tensor).
    if (cfg_.rotation > 0)
      for (auto& c : compressors_) c->set_message_key(make_key(0x44505f524f54ull /* "DP_ROT" */, uint64_t(iteration_)));
    for (size_t i = 0; i < tensors_.size(); ++i)
      compressors_[i]->encode(grads + tensors_[i].offset, message_.data() + wire_offset_[i]);
  }
  gathered_.resize(size_t(D * wire_total_));
  {
    // The wire is bytes: the gather only copies it (never a float operation that could change a NaN's bits).
    ScopedPhase t(timers, "dp_allreduce", "dp_allgather compressed");
    group.device.allgather(message_.data(), gathered_.data(), size_t(wire_total_), Traffic::DataParallel);
  }
  // Saved versus a dense ring all-reduce of the same gradients (2(D-1)/D of
  // them per rank) on the run's gradient wire.
  int64_t dense = 0;
  for (const auto& t : tensors_) dense += t.rows * t.cols;
  dp.counters().add_saved(Traffic::DataParallel,
                          int64_t(double(wire_value_bytes(group.wire)) * 2.0 * double(D - 1) / double(D) * double(dense)) -
                              4 * (D - 1) * wire_total_);
  ScopedPhase t(timers, "decompress");
  const float inv = 1.0f / float(D);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const TensorDesc& d = tensors_[i];
    const int64_t n = d.rows * d.cols;
    float* g = grads + d.offset;
    decoded_.resize(size_t(n));
    // Rank 0's message first, then each next rank's added: one order everywhere.
    // (axpy by 1 and scale are exact adds and products: the CPU's loops' bits.)
    compressors_[i]->decode(gathered_.data() + wire_offset_[i], g);
    for (int64_t r = 1; r < D; ++r) {
      compressors_[i]->decode(gathered_.data() + r * wire_total_ + wire_offset_[i], decoded_.data());
      ops_.axpy(g, 1.0f, decoded_.data(), n);
    }
    ops_.scale(g, inv, n);
  }
}

std::string DataParallelGatherCompression::state_prefix(size_t i) const {
  return fmt::format("dp/{}/{}/", method_name(cfg_.method), tensors_[i].name);
}

void DataParallelGatherCompression::save_state(TensorFileWriter& w) const {
  for (size_t i = 0; i < tensors_.size(); ++i) compressors_[i]->save_state(w, state_prefix(i));
}

bool DataParallelGatherCompression::load_state(const TensorFileReader& r) {
  bool complete = true;
  for (size_t i = 0; i < tensors_.size(); ++i) complete &= compressors_[i]->load_state(r, state_prefix(i));
  return complete;
}

}  // namespace occ
