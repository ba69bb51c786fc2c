#include "compress/compressed_backprop.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/rng.h"

namespace occ {

namespace {
// The link's compressor: the method, under LEP's error feedback where asked (a sender's).
std::unique_ptr<MatrixCompressor> backprop_compressor(const CompressedBackpropConfig& cfg, int64_t rows, int64_t cols,
                                                      uint64_t seed, uint64_t link_key, CompressorPlacement where) {
  auto inner = make_compressor(cfg.spec(), rows, cols, seed, link_key, where);
  if (!cfg.lazy_error) return inner;
  return std::make_unique<ErrorFeedback>(std::move(inner), *where.ops, cfg.lep_decay);
}
}  // namespace

CompressedBackprop::CompressedBackprop(const CompressedBackpropConfig& cfg, int64_t rows, int64_t cols, uint64_t seed,
                                       uint64_t link_key, int chunk, CompressorPlacement where,
                                       const std::string& dump_name, uint64_t link)
    : LinkCodec(backprop_compressor(cfg, rows, cols, seed, link_key, where), cfg.spec(), cfg.lossless, where,
                cfg.debug_dump, dump_name, link),
      feedback_(cfg.lazy_error ? static_cast<const ErrorFeedback*>(compressor_.get()) : nullptr),
      state_prefix_((cfg.method == CompressionMethod::PowerSgd ? std::string("cb/")
                                                               : fmt::format("cb/{}/", method_name(cfg.method))) +
                    (chunk > 0 ? fmt::format("chunk{}/", chunk) : std::string())) {}

const DeviceBuffer<float>* CompressedBackprop::residual() const {
  return feedback_ ? &feedback_->residual() : nullptr;
}

uint64_t backprop_link_key(const ParallelLayout& layout, int virtual_stage) {
  return make_key(0x4257440000ull /* "BWD" */, uint64_t(virtual_stage), uint64_t(layout.tp_rank),
                  uint64_t(layout.dp_rank));
}

CompressedBackpropLinks make_backprop_links(const CompressedBackpropConfig& cfg, const ParallelLayout& layout,
                                            int64_t tokens, int64_t hidden, uint64_t seed,
                                            CompressorPlacement where) {
  CompressedBackpropLinks links;
  if (!cfg.enabled) return links;
  // The matrix one TP rank sends backward: its 1/T slice of [tokens, hidden].
  const int64_t rows = tokens / layout.tp_size, cols = hidden;
  OCC_CHECK(tokens % layout.tp_size == 0,
            "--inter-grad-comp needs micro-batch x seq-length divisible by --tensor-model-parallel-size");
  // A receiver only decodes: it keeps no LEP residual (nor its buffers).
  CompressedBackpropConfig receiver = cfg;
  receiver.lazy_error = false;
  // Link key: the sending virtual stage and TP rank (each link has its own warm start).
  for (int c = 0; c < layout.vp_size; ++c) {
    const int virtual_stage = layout.virtual_stage(c);
    links.send.push_back(virtual_stage == 0 ? nullptr
                                            : std::make_unique<CompressedBackprop>(
                                                  cfg, rows, cols, seed,
                                                  uint64_t(virtual_stage) * 1000 + uint64_t(layout.tp_rank), c, where,
                                                  fmt::format("pp_bwd_vs{}_tp{}_dp{}", virtual_stage, layout.tp_rank,
                                                              layout.dp_rank),
                                                  backprop_link_key(layout, virtual_stage)));
    // The receiver of chunk c's output gradient, sent by virtual stage + 1 (same TP and DP rank): its keys.
    links.recv.push_back(virtual_stage + 1 == layout.virtual_stages()
                             ? nullptr
                             : std::make_unique<CompressedBackprop>(
                                   receiver, rows, cols, seed, uint64_t(virtual_stage + 1) * 1000 + uint64_t(layout.tp_rank),
                                   c, where, "", backprop_link_key(layout, virtual_stage + 1)));
  }
  return links;
}

}  // namespace occ
