#pragma once
// Optimus-CC's compressed backpropagation (CB) between pipeline stages, with
// lazy error propagation (LEP) and epilogue-only compression (EC).
//   CB : the activation gradient a stage sends backward is compressed (each
//        TP rank its own 1/T slice: rows = tokens, cols = hidden); by PowerSGD
//        as in the paper, or by any method of compressor_factory.h.
//   LEP: the sender keeps the error of the last compressed message on its link
//        and adds it to the next one before compressing (kept across iterations).
//   EC : a rank compresses only the backward sends it makes after its last
//        forward of the iteration (parallel/pipeline_schedule.h); for plain
//        1F1B the last P - s sends of stage s (its last steady-state send and
//        its cool-down sends). The receiver derives the same set from the
//        sender's schedule. Under the interleaved schedule every backward send
//        between model chunks crosses ranks, so CB and LEP apply to each, with
//        one link (warm start, LEP residual) per chunk boundary.
// LEP and EC apply to any method. Forward activations are compressed (or not)
// separately: compress/compressed_activations.h.
#include <memory>
#include <string>
#include <vector>

#include "compress/compressor_factory.h"
#include "compress/error_feedback.h"
#include "compress/link_codec.h"
#include "compress/powersgd.h"
#include "core/layout.h"
#include "parallel/message_codec.h"

namespace occ {

struct CompressedBackpropConfig {
  bool enabled = false;          // --inter-grad-comp
  int rank = 16;                 // --inter-grad-comp-rank
  CompressionMethod method = CompressionMethod::PowerSgd;  // --inter-grad-comp-method
  double topk_fraction = 0.1;    // --inter-grad-comp-topk-fraction
  bool stochastic = false;       // --inter-grad-comp-rounding stochastic (block methods)
  int rotation = 0;              // --inter-grad-comp-rotation hadamard:B (block methods; 0: none)
  double high_fraction = kDefaultHighFraction;  // --inter-grad-comp-adaptive-high-fraction (adaptive)
  bool lazy_error = false;       // --use-error-feedback
  float lep_decay = 1.0f;        // --inter-grad-comp-lep-decay: LEP's residual is scaled by it before it joins
  bool epilogue_only = false;    // --inter-grad-comp-epilogue-only
  LosslessCoding lossless = LosslessCoding::None;  // --inter-grad-comp-lossless (compress/link_codec.h)
  std::string debug_dump = {};   // --debug-dump-messages DIR (compress/message_dump.h; senders only)
  CompressorSpec spec() const {  // (by name: the spec's later fields are other methods')
    CompressorSpec s{method, rank, topk_fraction, stochastic, rotation};
    s.high_fraction = high_fraction;
    return s;
  }
};

// The codec of one backward link, as the pipeline exchange calls it.
class CompressedBackprop final : public LinkCodec {
 public:
  // rows x cols: the matrix one TP rank sends (tokens / T x hidden). chunk:
  // the sender's model chunk (interleaved schedule; its state is saved apart).
  // where: the device of the stage's messages (compressor_factory.h).
  // link_key seeds the method's state (PowerSGD's Q) and a rotation; link: the
  // sender's identity that keys stochastic rounding and a rotation with each
  // message's id (backprop_link_key). A receiver passes its sender's link_key
  // and link, so it derives the same rotation.
  CompressedBackprop(const CompressedBackpropConfig& cfg, int64_t rows, int64_t cols, uint64_t seed, uint64_t link_key,
                     int chunk = 0, CompressorPlacement where = {}, const std::string& dump_name = "",
                     uint64_t link = 0);

  // Is a backward send compressed? after_last_forward: the sender makes it
  // after its last forward of the iteration (pipeline_schedule.h's
  // backwards_after_last_forward). Both ends of the link ask with the
  // sender's schedule, so they agree without a message.
  static bool compresses(const CompressedBackpropConfig& cfg, bool after_last_forward) {
    return cfg.enabled && (!cfg.epilogue_only || after_last_forward);
  }

  // (encode: the gradient plus the LEP residual; decode: the gradient; LinkCodec.)
  // The LEP residual after the last encode, on the link's device (null without LEP).
  const DeviceBuffer<float>* residual() const;

  bool stateful() const { return compressor_->stateful(); }
  void save_state(TensorFileWriter& w) const { compressor_->save_state(w, state_prefix_); }
  bool load_state(const TensorFileReader& r) { return compressor_->load_state(r, state_prefix_); }

 private:
  const ErrorFeedback* feedback_ = nullptr;
  // "cb/" for PowerSGD (as before other methods existed), "cb/METHOD/" for the others, so a
  // residual saved under one method is never taken for another's.
  std::string state_prefix_;
};

// The identity of the backward link that virtual stage `virtual_stage` sends
// on (with its TP and DP rank): with each message's id it keys stochastic rounding.
uint64_t backprop_link_key(const ParallelLayout& layout, int virtual_stage);

// A rank's backward links, one per model chunk (layout.vp_size of them):
// send[c] carries chunk c's input gradient to the previous virtual stage
// (null for the first virtual stage), recv[c] brings the gradient of chunk
// c's output from the next one (null for the last). Empty without CB.
struct CompressedBackpropLinks {
  std::vector<std::unique_ptr<CompressedBackprop>> send, recv;
};
// tokens: of one micro-batch (each TP rank sends its 1/T slice), hidden: the
// activation width; where: the device of the stage's messages. Throws
// occ::Error when the tokens do not split over TP.
CompressedBackpropLinks make_backprop_links(const CompressedBackpropConfig& cfg, const ParallelLayout& layout,
                                            int64_t tokens, int64_t hidden, uint64_t seed,
                                            CompressorPlacement where = {});

}  // namespace occ
