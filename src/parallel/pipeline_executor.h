#pragma once
// Runs one iteration's non-interleaved 1F1B program (pipeline_schedule.h) on
// this stage: the order of forwards and backwards, the activation messages
// between stages (PipelineExchange), which backward messages are compressed,
// and the compute timers. What a forward or a backward of a micro-batch
// computes is the caller's (the model's): the executor calls back for it, so
// parallel/ never sees the model.
#include <cstddef>
#include <functional>
#include <vector>

#include "core/layout.h"
#include "core/timer.h"
#include "parallel/message_codec.h"
#include "parallel/pipeline_exchange.h"

namespace occ {

// The stage's work on micro-batch mb (0-based, in schedule order). `slot`
// names the activation storage the micro-batch holds from its forward to its
// backward: 0 <= slot < PipelineExecutor::slots(M), reused once it is free.
struct MicroBatchSteps {
  // Reads the micro-batch's samples (timed as the "data" phase).
  std::function<void(int mb, int slot)> load;
  // x: activations received from the previous stage (unused on the first);
  // y: activations to send to the next stage (unused on the last). Returns
  // the summed token loss (last stage; 0 elsewhere).
  std::function<double(int mb, int slot, const float* x, float* y)> forward;
  // dy: gradient received from the next stage (unused on the last); dx:
  // gradient to send back (unused on the first). last: the iteration's final
  // backward, from which on gradients become final.
  std::function<void(int mb, int slot, const float* dy, float* dx, bool last)> backward;
  // Optional: sees dx just before a compressed backward send encodes it.
  std::function<void(int mb, int slot, const float* dx)> before_compressed_send;
};

// Which backward messages are compressed, and by what. The rule comes from
// the caller (compress/ knows it) so both ends of a link apply the same one.
struct BackwardCompression {
  MessageCodec* send = nullptr;        // this stage's link to the previous stage
  const MessageCodec* recv = nullptr;  // the next stage's link to this one
  // Does stage `sender` (of num_stages) compress its backward send of
  // micro-batch mb (of M)? Sender and receiver both ask with the sender's
  // index, so they agree without a message. Unset: nothing is compressed.
  std::function<bool(int num_stages, int sender, int M, int mb)> compresses;
};

// Forward messages: when set, every one is compressed (no schedule rule).
struct ForwardCompression {
  MessageCodec* send = nullptr;        // this stage's link to the next stage
  const MessageCodec* recv = nullptr;  // the previous stage's link to this one
};

class PipelineExecutor {
 public:
  PipelineExecutor(const ParallelLayout& layout, PipelineExchange& exchange, PhaseTimers& timers,
                   BackwardCompression compression, ForwardCompression forward = {});

  // Micro-batches in flight on this stage at once (min(P - s, M)): the number
  // of activation slots MicroBatchSteps uses.
  int slots(int M) const;
  // Runs the 1F1B program over M micro-batches whose messages are `count`
  // floats; returns once every send has completed. Returns the summed loss.
  double run(int M, size_t count, const MicroBatchSteps& steps);

 private:
  bool compresses(int sender, int M, int mb) const;

  ParallelLayout layout_;
  PipelineExchange& exchange_;
  PhaseTimers& timers_;
  BackwardCompression compression_;
  ForwardCompression forward_;
  std::vector<std::vector<float>> fwd_send_, bwd_send_;  // per micro-batch (in flight until wait_sends)
  std::vector<float> x_in_, dx_out_;
};

}  // namespace occ
