#pragma once
// Activations forward and activation gradients backward between neighbouring
// stages. With TP > 1 each TP rank sends only its 1/T slice of the [N, C]
// tensor and the receiver all-gathers it in its TP group (Megatron's
// scatter-gather), so inter-stage bytes are not multiplied by T.
// With interleaving (layout.vp_size > 1) the ranks form a ring: the last
// rank's chunk c feeds the first rank's chunk c + 1, and backward the first
// rank's chunk c + 1 feeds the last rank's chunk c.
// Each message goes over this rank's link to the neighbour for its direction
// (parallel/pipeline_links.h), which delivers in the order sent, so a message
// carries no name.
// Messages live on the stage's device. NCCL's links move device memory; MPI's
// move host memory, so a staged exchange (a GPU job on MPI; or the CPU with
// --debug-host-staging) copies each message through page-locked host memory,
// after encoding it on the device: only the compressed wire crosses to the host.
// Uncompressed messages travel in the activations' wire format (core/
// wire_format.h): in a --bf16 / --fp16 run packed to 16 bits on the device
// before they leave it (lossless: the step rounded them), unpacked on arrival;
// so are the receiver's TP all-gathers of them.
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/buffer.h"
#include "core/host_staging.h"
#include "core/layout.h"
#include "core/timer.h"
#include "core/wire_format.h"
#include "kernels/ops.h"
#include "parallel/message_codec.h"
#include "parallel/pipeline_links.h"
#include "parallel/send_pool.h"
#include "parallel/wire_collectives.h"

namespace occ {

class PipelineExchange {
 public:
  // links: this rank's links to its neighbours. tp: the TP group for data on
  // `device` (the model's: NCCL, staged or MPI). counters: where compression's
  // savings are counted (the links count the bytes sent). staged: messages in
  // host memory are copied through page-locked buffers (required off the CPU
  // unless the links move device memory).
  // sequence_parallel: the stages read and write only this rank's slice of
  // each message (parallel/sequence_parallel.h), so the receiver's all-gather is skipped.
  // wire: the format uncompressed messages and their TP all-gathers travel in;
  // ops: the backend of `device`, which packs a 16-bit wire (needed unless wire is fp32).
  PipelineExchange(PipelineLinks& links, Communicator& tp, TrafficCounters& counters, const ParallelLayout& layout,
                   PhaseTimers& timers, Device device = Device::Cpu, bool staged = false,
                   bool sequence_parallel = false, Precision wire = Precision::Fp32, kernels::Ops* ops = nullptr);

  // A device buffer of `count` floats for a message to send: one no queued
  // send still reads (parallel/send_pool.h). It is the exchange's until the
  // next wait_sends(): give it to send_forward or send_backward.
  float* send_buffer(size_t count);
  // Nonblocking send of x[count] (on the device), the output (forward) or
  // input gradient (backward) of micro-batch mb in this rank's model chunk
  // `chunk`. A buffer from send_buffer() is reused once the link has sent it;
  // any other must stay untouched until wait_sends().
  // With `encoder` (on the device too), the slice is compressed (CB
  // backward, activation compression forward) and the message is its wire form.
  void send_forward(const float* x, size_t count, int mb, int chunk, MessageCodec* encoder = nullptr);
  void send_backward(const float* dx, size_t count, int mb, int chunk, MessageCodec* encoder = nullptr);
  // Blocking receive (waits with back-off) into x[count] (on the device),
  // all-gathered over TP (sequence parallel: only this rank's slice is written): the input (forward) or output gradient (backward)
  // of micro-batch mb in this rank's chunk `chunk`.
  // With `decoder`, the message is a compressed slice, decoded before the gather.
  void recv_forward(float* x, size_t count, int mb, int chunk, const MessageCodec* decoder = nullptr);
  void recv_backward(float* dx, size_t count, int mb, int chunk, const MessageCodec* decoder = nullptr);
  // Where the messages live.
  Device device() const { return device_; }
  // The format uncompressed messages travel in.
  Precision wire() const { return wire_; }
  // Do sends read device memory after they return (NCCL's links)? Then no GPU
  // free may run until wait_sends() (core/device.h: DeferredDeviceFrees).
  bool sends_from_device() const { return links_.on_device && device_ != Device::Cpu; }
  // How traces name micro-batch mb of chunk `chunk`: "3", or "3.c1" when interleaved.
  std::string label(int mb, int chunk) const;
  void wait_sends();
  // The iteration whose messages follow (0-based, the trainer's count before
  // the step): with the micro-batch and chunk, the id a codec encodes them under.
  void begin_iteration(int64_t iteration) { iteration_ = iteration; }

 private:
  // One direction of traffic: its peer, its link, traffic class and names.
  struct Direction {
    int peer_stage;
    PipelineLink* link;
    Traffic traffic;
    const char* what;       // the message, for errors ("activations")
    const char* recv_what;  // the receive, for errors
    const char* letter;     // "F" or "B" in events
  };
  Direction forward_out() const;
  Direction forward_in() const;
  Direction backward_out() const;
  Direction backward_in() const;
  // sender_chunk: the chunk whose output (or input gradient) the message is.
  void send(const Direction& d, const float* x, size_t count, int mb, int sender_chunk, MessageCodec* encoder);
  void recv(const Direction& d, float* x, size_t count, int mb, int sender_chunk, const MessageCodec* decoder);

  void gather_slice(float* x, size_t count);
  // The device buffer a staged codec encodes into, or a codec decodes from.
  float* device_wire(size_t floats);
  // Does an uncompressed message travel packed (a 16-bit wire)?
  bool packed() const { return wire_ != Precision::Fp32; }

  PipelineLinks& links_;
  Communicator& tp_;
  TrafficCounters& counters_;
  ParallelLayout layout_;
  PhaseTimers& timers_;
  Device device_;
  bool staged_;
  bool sequence_parallel_;
  Precision wire_;
  kernels::Ops* ops_;
  int64_t iteration_ = 0;

  // Messages in flight: on the device (the executor's outputs; wires where the
  // links send device memory, or on the CPU) and in page-locked host memory
  // (staged copies). Each reused once its link has sent it.
  SendPool<DeviceBuffer<float>> device_out_;
  SendPool<PinnedBuffer> host_out_;
  PinnedBuffer inbox_;         // a received message that is not received in place
  DeviceBuffer<float> wire_buffer_;  // a wire encoded or packed (staged), decoded or unpacked on the device (grows only)
  WireScratch gather_scratch_;       // the TP all-gather's slices in the wire's format
};

}  // namespace occ
