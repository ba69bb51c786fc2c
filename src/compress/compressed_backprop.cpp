#include "compress/compressed_backprop.h"

namespace occ {

CompressedBackprop::CompressedBackprop(const CompressedBackpropConfig& cfg, int64_t rows, int64_t cols, uint64_t seed,
                                       uint64_t link_key) {
  auto power = std::make_unique<PowerSgdCompressor>(rows, cols, cfg.rank, seed, link_key);
  if (cfg.lazy_error) {
    auto fb = std::make_unique<ErrorFeedback>(std::move(power));
    feedback_ = fb.get();
    compressor_ = std::move(fb);
  } else {
    compressor_ = std::move(power);
  }
}

bool CompressedBackprop::compresses(const CompressedBackpropConfig& cfg, int num_stages, int sender, int M, int mb) {
  if (!cfg.enabled || sender == 0) return false;  // stage 0 sends nothing backward
  if (!cfg.epilogue_only) return true;
  // Backward sends go out in micro-batch order; the last P - s are the epilogue.
  return mb >= M - (num_stages - sender);
}

const std::vector<float>* CompressedBackprop::residual() const {
  return feedback_ ? &feedback_->residual() : nullptr;
}

}  // namespace occ
