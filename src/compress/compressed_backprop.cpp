#include "compress/compressed_backprop.h"

#include <fmt/format.h>

#include "core/error.h"

namespace occ {

CompressedBackprop::CompressedBackprop(const CompressedBackpropConfig& cfg, int64_t rows, int64_t cols, uint64_t seed,
                                       uint64_t link_key)
    : state_prefix_(cfg.method == CompressionMethod::PowerSgd ? "cb/" : fmt::format("cb/{}/", method_name(cfg.method))) {
  auto inner = make_compressor(cfg.spec(), rows, cols, seed, link_key);
  if (cfg.lazy_error) {
    auto fb = std::make_unique<ErrorFeedback>(std::move(inner));
    feedback_ = fb.get();
    compressor_ = std::move(fb);
  } else {
    compressor_ = std::move(inner);
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

CompressedBackpropLinks make_backprop_links(const CompressedBackpropConfig& cfg, const ParallelLayout& layout,
                                            int64_t tokens, int64_t hidden, uint64_t seed) {
  CompressedBackpropLinks links;
  if (!cfg.enabled) return links;
  // The matrix one TP rank sends backward: its 1/T slice of [tokens, hidden].
  const int64_t rows = tokens / layout.tp_size, cols = hidden;
  OCC_CHECK(tokens % layout.tp_size == 0,
            "--inter-grad-comp needs micro-batch x seq-length divisible by --tensor-model-parallel-size");
  // Link key: the sending stage and TP rank (each link has its own warm start).
  if (!layout.first_stage())
    links.send = std::make_unique<CompressedBackprop>(cfg, rows, cols, seed,
                                                      uint64_t(layout.pp_rank) * 1000 + uint64_t(layout.tp_rank));
  if (!layout.last_stage()) links.recv = std::make_unique<CompressedBackprop>(cfg, rows, cols, seed, 0);
  return links;
}

}  // namespace occ
