#pragma once
// Activations forward and activation gradients backward between neighbouring
// stages. With TP > 1 each TP rank sends only its 1/T slice of the [N, C]
// tensor and the receiver all-gathers it in its TP group (Megatron's
// scatter-gather), so inter-stage bytes are not multiplied by T.
#include <string>
#include <vector>

#include "comm/mpi_communicator.h"
#include "core/layout.h"
#include "core/timer.h"
#include "parallel/message_codec.h"

namespace occ {

class PipelineExchange {
 public:
  PipelineExchange(MpiCommunicator& pp, MpiCommunicator& tp, const ParallelLayout& layout, PhaseTimers& timers);

  // Nonblocking send of x[count] for micro-batch mb; the buffer must stay
  // untouched until wait_sends().
  // With `encoder`, the slice is compressed (CB backward, activation
  // compression forward) and the message is its wire form.
  void send_forward(const float* x, size_t count, int mb, MessageCodec* encoder = nullptr);
  void send_backward(const float* dx, size_t count, int mb, MessageCodec* encoder = nullptr);
  // Blocking receive (waits with back-off) into x[count], all-gathered over TP.
  // With `decoder`, the message is a compressed slice, decoded before the gather.
  void recv_forward(float* x, size_t count, int mb, const MessageCodec* decoder = nullptr);
  void recv_backward(float* dx, size_t count, int mb, const MessageCodec* decoder = nullptr);
  void wait_sends();

 private:
  // One direction of the link: its peer, tags, traffic class and names.
  struct Direction {
    int peer_stage;
    int tag_offset;  // 0 forward, 1 backward
    Traffic traffic;
    const char* what;       // the message, for errors ("activations")
    const char* recv_what;  // the receive, for errors
    const char* letter;     // "F" or "B" in events
  };
  Direction forward_out() const;
  Direction forward_in() const;
  Direction backward_out() const;
  Direction backward_in() const;
  void send(const Direction& d, const float* x, size_t count, int mb, MessageCodec* encoder,
            std::vector<std::vector<float>>& wires);
  void recv(const Direction& d, float* x, size_t count, int mb, const MessageCodec* decoder);

  MpiCommunicator& pp_;
  MpiCommunicator& tp_;
  ParallelLayout layout_;
  PhaseTimers& timers_;
  void gather_slice(float* x, size_t count);

  std::vector<MpiCommunicator::Request> pending_;
  // Compressed messages in flight, per micro-batch (a forward and a backward
  // message of different micro-batches can be in flight at once).
  std::vector<std::vector<float>> forward_wire_, backward_wire_;
  std::vector<float> recv_wire_;
};

}  // namespace occ
