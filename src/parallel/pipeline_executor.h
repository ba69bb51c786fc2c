#pragma once
// Runs one iteration's 1F1B program (pipeline_schedule.h: plain, or
// interleaved over layout.vp_size model chunks) on this rank: the order of
// forwards and backwards, the activation messages between virtual stages
// (PipelineExchange), which backward messages are compressed, the activation
// slots, and the compute timers. What a forward or a backward of a micro-batch
// computes is the caller's (the model's): the executor calls back for it, so
// parallel/ never sees the model.
#include <cstddef>
#include <functional>
#include <vector>

#include "core/buffer.h"
#include "core/layout.h"
#include "core/timer.h"
#include "parallel/message_codec.h"
#include "parallel/pipeline_exchange.h"

namespace occ {

// The rank's work on micro-batch mb (0-based) in model chunk `chunk` (0
// without interleaving). `slot` names the activation storage the pair holds
// from its forward to its backward: 0 <= slot < PipelineExecutor::slots(M),
// reused once it is free.
struct MicroBatchSteps {
  // Reads the micro-batch's samples (timed as the "data" phase).
  std::function<void(int mb, int slot, int chunk)> load;
  // x: activations received from the previous virtual stage (unused where the
  // chunk starts with the embedding); y: activations for the next one (unused
  // where it ends with the head); both on the exchange's device. The loss is
  // the stage's business (it stays on the device until the iteration's end).
  // Forward and backward may return with their work still queued on a GPU:
  // the compute timers then hold the time to queue it, and the wait shows in
  // the next phase that needs its results (a staged send, the iteration's end).
  std::function<void(int mb, int slot, int chunk, const float* x, float* y)> forward;
  // dy: gradient received from the next virtual stage (unused with the head);
  // dx: gradient to send back (unused with the embedding). last: the chunk's
  // final backward of the iteration, from which on its gradients become final.
  std::function<void(int mb, int slot, int chunk, const float* dy, float* dx, bool last)> backward;
  // Optional: sees dx (on the device) just before a compressed backward send encodes it.
  std::function<void(int mb, int slot, int chunk, const float* dx)> before_compressed_send;
};

// Which backward messages are compressed, and by what. The rule comes from
// the caller (compress/ knows it) so both ends of a link apply the same one.
struct BackwardCompression {
  // Per model chunk: its link to the previous virtual stage (null where it
  // has the embedding) and the next virtual stage's link to it (null where
  // it has the head). Empty: nothing is compressed.
  std::vector<MessageCodec*> send;
  std::vector<const MessageCodec*> recv;
  // Is a backward send compressed? after_last_forward: the sender makes it
  // after its last forward (pipeline_schedule.h). Sender and receiver both
  // derive it from the sender's schedule, so they agree without a message.
  std::function<bool(bool after_last_forward)> compresses;
};

// Forward messages: when set, every one is compressed (no schedule rule).
struct ForwardCompression {
  MessageCodec* send = nullptr;        // this rank's link to the next one
  const MessageCodec* recv = nullptr;  // the previous rank's link to this one
};

class PipelineExecutor {
 public:
  PipelineExecutor(const ParallelLayout& layout, PipelineExchange& exchange, PhaseTimers& timers,
                   BackwardCompression compression, ForwardCompression forward = {});

  // Micro-batches (of any chunk) in flight on this rank at once (min(P - s,
  // M) for plain 1F1B): the number of activation slots MicroBatchSteps uses.
  int slots(int M) const;
  // Runs the program over M micro-batches whose messages are `count` floats;
  // returns once every send has completed.
  void run(int M, size_t count, const MicroBatchSteps& steps);

 private:
  bool compresses(bool after_last_forward) const;

  ParallelLayout layout_;
  PipelineExchange& exchange_;
  PhaseTimers& timers_;
  BackwardCompression compression_;
  ForwardCompression forward_;
  // On the exchange's device (messages to send come from the exchange).
  DeviceBuffer<float> x_in_, dx_out_;
};

}  // namespace occ
