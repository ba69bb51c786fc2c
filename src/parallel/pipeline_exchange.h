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
  // untouched until wait_sends() (or until the slot is reused: see wait_send).
  // With `encoder`, the slice is compressed (e.g. CB) and the message is its wire form.
  void send_forward(const float* x, size_t count, int mb);
  void send_backward(const float* dx, size_t count, int mb, MessageCodec* encoder = nullptr);
  // Blocking receive (waits with back-off) into x[count], all-gathered over TP.
  // With `decoder`, the message is a compressed slice, decoded before the gather.
  void recv_forward(float* x, size_t count, int mb);
  void recv_backward(float* dx, size_t count, int mb, const MessageCodec* decoder = nullptr);
  void wait_sends();

 private:
  void send(const float* x, size_t count, int peer_stage, int tag, Traffic traffic, const char* what,
            const std::string& event);
  void recv(float* x, size_t count, int peer_stage, int tag, const char* what, const std::string& event);

  MpiCommunicator& pp_;
  MpiCommunicator& tp_;
  ParallelLayout layout_;
  PhaseTimers& timers_;
  void gather_slice(float* x, size_t count);

  std::vector<MpiCommunicator::Request> pending_;
  std::vector<std::vector<float>> wire_;  // compressed messages in flight, per micro-batch
  std::vector<float> recv_wire_;
};

}  // namespace occ
