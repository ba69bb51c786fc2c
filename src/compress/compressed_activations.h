#pragma once
// Compression of the forward activations sent between pipeline stages
// (--activation-comp-method): the half of pipeline traffic the paper leaves
// uncompressed. Each TP rank compresses its own 1/T slice (rows = tokens / T,
// cols = hidden) and the receiver decodes it before its forward, so the next
// stage computes on the decoded activation in forward and backward alike (as
// inference with compression would); the gradient it sends back is the one of
// the decoded activation (straight-through). Every forward send is compressed,
// without error feedback: an activation is not a quantity that accumulates,
// so there is no residual to carry (and the methods are stateless: nothing to
// checkpoint).
#include <memory>

#include "compress/compressor_factory.h"
#include "compress/link_codec.h"
#include "core/layout.h"
#include "parallel/message_codec.h"

namespace occ {

struct ActivationCompressionConfig {
  bool enabled = false;                                   // --activation-comp-method other than none
  CompressionMethod method = CompressionMethod::Int8;     // --activation-comp-method
  double topk_fraction = 0.25;                            // --activation-comp-topk-fraction
  bool stochastic = false;                                // --activation-comp-rounding stochastic (block methods)
  int rotation = 0;                                       // --activation-comp-rotation hadamard:B (0: none)
  double high_fraction = kDefaultHighFraction;  // --activation-comp-adaptive-high-fraction (adaptive)
  LosslessCoding lossless = LosslessCoding::None;         // --activation-comp-lossless (compress/link_codec.h)
  std::string debug_dump = {};                            // --debug-dump-messages DIR (compress/message_dump.h)
  CompressorSpec spec() const {  // (by name: the spec's later fields are other methods')
    CompressorSpec s{method, 0, topk_fraction, stochastic, rotation};
    s.high_fraction = high_fraction;
    return s;
  }
  // The methods forward activations accept (stateless, no error feedback needed).
  static const std::vector<CompressionMethod>& methods();
};

// The codec of one forward link: a stateless compressor of the link's slice.
class CompressedActivations final : public LinkCodec {
 public:
  // seed: the run's; link: the sender's identity (activation_link_key; a
  // receiver passes its sender's, activation_sender_key); where: the device of the stage's messages
  // (compressor_factory.h); dump_name: the sender's name for
  // --debug-dump-messages ("": none).
  CompressedActivations(const ActivationCompressionConfig& cfg, int64_t rows, int64_t cols, uint64_t seed = 0,
                        uint64_t link = 0, CompressorPlacement where = {}, const std::string& dump_name = "");
};

// The identity of a rank's forward link (its stage, TP and DP rank): with each
// message's iteration, micro-batch and chunk it keys stochastic rounding.
uint64_t activation_link_key(const ParallelLayout& layout);
// The identity of the forward link a rank receives on: its previous stage's
// (the ring wraps under interleaving), from which it derives each message's
// rotation as its sender did.
uint64_t activation_sender_key(const ParallelLayout& layout);

// A stage's forward links: `send` to the next stage (none on the last),
// `recv` from the previous one (none on the first); both null when off.
struct CompressedActivationLinks {
  std::unique_ptr<CompressedActivations> send, recv;
};
// tokens: of one micro-batch; hidden: the activation width; seed: the run's
// (it keys stochastic rounding); where: the device of the stage's messages.
// Throws occ::Error when the tokens do not split over TP.
CompressedActivationLinks make_activation_links(const ActivationCompressionConfig& cfg, const ParallelLayout& layout,
                                                int64_t tokens, int64_t hidden, uint64_t seed,
                                                CompressorPlacement where = {});

}  // namespace occ
