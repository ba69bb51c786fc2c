#pragma once
// Optimus-CC's compressed backpropagation (CB) between pipeline stages, with
// lazy error propagation (LEP) and epilogue-only compression (EC).
//   CB : the activation gradient a stage sends backward is compressed (each
//        TP rank its own 1/T slice: rows = tokens, cols = hidden); by PowerSGD
//        as in the paper, or by any method of compressor_factory.h.
//   LEP: the sender keeps the error of the last compressed message on its link
//        and adds it to the next one before compressing (kept across iterations).
//   EC : stage s compresses only its last P - s backward sends of an iteration
//        (its last steady-state send and its cool-down sends); the receiver
//        derives the same set from the schedule.
// LEP and EC apply to any method. Forward activations are compressed (or not)
// separately: compress/compressed_activations.h.
#include <memory>

#include "compress/compressor_factory.h"
#include "compress/powersgd.h"
#include "core/layout.h"
#include "parallel/message_codec.h"

namespace occ {

struct CompressedBackpropConfig {
  bool enabled = false;          // --inter-grad-comp
  int rank = 16;                 // --inter-grad-comp-rank
  CompressionMethod method = CompressionMethod::PowerSgd;  // --inter-grad-comp-method
  double topk_fraction = 0.1;    // --inter-grad-comp-topk-fraction
  bool lazy_error = false;       // --use-error-feedback
  bool epilogue_only = false;    // --inter-grad-comp-epilogue-only
  CompressorSpec spec() const { return {method, rank, topk_fraction}; }
};

// The codec of one backward link, as the pipeline exchange calls it.
class CompressedBackprop final : public MessageCodec {
 public:
  // rows x cols: the matrix one TP rank sends (tokens / T x hidden).
  CompressedBackprop(const CompressedBackpropConfig& cfg, int64_t rows, int64_t cols, uint64_t seed, uint64_t link_key);

  // Does stage `sender` compress its backward send of micro-batch mb (of M)?
  // Both ends of the link call this with the sender's stage index.
  static bool compresses(const CompressedBackpropConfig& cfg, int num_stages, int sender, int M, int mb);

  int64_t wire_floats() const override { return compressor_->wire_floats(); }
  // Sender: encodes grad[rows x cols] (plus the LEP residual) into wire.
  void encode(const float* grad, float* wire) override { compressor_->encode(grad, wire); }
  // Receiver: rebuilds the gradient from a message of this link's shape.
  void decode(const float* wire, float* out) const override { compressor_->decode(wire, out); }
  // The LEP residual after the last encode (empty without LEP).
  const std::vector<float>* residual() const;

  bool stateful() const { return compressor_->stateful(); }
  void save_state(TensorFileWriter& w) const { compressor_->save_state(w, state_prefix_); }
  bool load_state(const TensorFileReader& r) { return compressor_->load_state(r, state_prefix_); }

 private:
  std::unique_ptr<MatrixCompressor> compressor_;
  const ErrorFeedback* feedback_ = nullptr;
  // "cb/" for PowerSGD (as before other methods existed), "cb/METHOD/" for the others, so a
  // residual saved under one method is never taken for another's.
  std::string state_prefix_;
};

// A stage's two backward links: `send` to the previous stage (none on the
// first), `recv` from the next stage (none on the last); both null without CB.
struct CompressedBackpropLinks {
  std::unique_ptr<CompressedBackprop> send, recv;
};
// tokens: of one micro-batch (each TP rank sends its 1/T slice), hidden: the
// activation width. Throws occ::Error when the tokens do not split over TP.
CompressedBackpropLinks make_backprop_links(const CompressedBackpropConfig& cfg, const ParallelLayout& layout,
                                            int64_t tokens, int64_t hidden, uint64_t seed);

}  // namespace occ
