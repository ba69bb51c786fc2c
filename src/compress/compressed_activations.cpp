#include "compress/compressed_activations.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/rng.h"

namespace occ {

const std::vector<CompressionMethod>& ActivationCompressionConfig::methods() {
  static const std::vector<CompressionMethod> m{CompressionMethod::Int8,  CompressionMethod::Fp8E4m3,
                                                CompressionMethod::Topk,  CompressionMethod::Mxfp4,
                                                CompressionMethod::Nvfp4, CompressionMethod::Int4,
                                                CompressionMethod::Int3,  CompressionMethod::Int2,
                                                CompressionMethod::LloydMax2, CompressionMethod::LloydMax3,
                                                CompressionMethod::Adaptive};
  return m;
}

CompressedActivations::CompressedActivations(const ActivationCompressionConfig& cfg, int64_t rows, int64_t cols,
                                             uint64_t seed, uint64_t link, CompressorPlacement where,
                                             const std::string& dump_name)
    : LinkCodec(make_compressor(cfg.spec(), rows, cols, seed, 0, where), cfg.spec(), cfg.lossless, where, cfg.debug_dump,
                dump_name, link) {}

uint64_t activation_link_key(const ParallelLayout& layout) {
  return make_key(0x4657440000ull /* "FWD" */, uint64_t(layout.pp_rank), uint64_t(layout.tp_rank),
                  uint64_t(layout.dp_rank));
}

uint64_t activation_sender_key(const ParallelLayout& layout) {
  ParallelLayout sender = layout;
  sender.pp_rank = (layout.pp_rank + layout.pp_size - 1) % layout.pp_size;
  return activation_link_key(sender);
}

CompressedActivationLinks make_activation_links(const ActivationCompressionConfig& cfg, const ParallelLayout& layout,
                                                int64_t tokens, int64_t hidden, uint64_t seed,
                                                CompressorPlacement where) {
  CompressedActivationLinks links;
  if (!cfg.enabled) return links;
  OCC_CHECK(tokens % layout.tp_size == 0,
            "--activation-comp-method needs micro-batch x seq-length divisible by --tensor-model-parallel-size");
  const int64_t rows = tokens / layout.tp_size, cols = hidden;
  // Interleaved, the last rank feeds the first one's next chunk: every rank sends and receives.
  const bool ring = layout.vp_size > 1 && layout.pp_size > 1;
  if (ring || !layout.last_stage())
    links.send = std::make_unique<CompressedActivations>(
        cfg, rows, cols, seed, activation_link_key(layout), where,
        fmt::format("pp_fwd_pp{}_tp{}_dp{}", layout.pp_rank, layout.tp_rank, layout.dp_rank));
  if (ring || !layout.first_stage())
    links.recv = std::make_unique<CompressedActivations>(cfg, rows, cols, seed, activation_sender_key(layout), where);
  return links;
}

}  // namespace occ
