#include "parallel/pipeline_exchange.h"

#include <fmt/format.h>

#include "core/error.h"
#include "parallel/pipeline_schedule.h"

namespace occ {

PipelineExchange::PipelineExchange(PipelineLinks& links, Communicator& tp, TrafficCounters& counters,
                                   const ParallelLayout& layout, PhaseTimers& timers, Device device, bool staged,
                                   bool sequence_parallel, Precision wire, kernels::Ops* ops)
    : links_(links),
      tp_(tp),
      counters_(counters),
      layout_(layout),
      timers_(timers),
      device_(device),
      staged_(staged && !links.on_device),
      sequence_parallel_(sequence_parallel),
      wire_(wire),
      ops_(ops),
      device_out_([device](size_t n) { return std::make_unique<DeviceBuffer<float>>(device, n); }),
      host_out_([](size_t n) {
        auto b = std::make_unique<PinnedBuffer>();
        b->reserve(n);
        return b;
      }),
      wire_buffer_(device),
      gather_scratch_(device) {
  OCC_CHECK(!packed() || (ops_ && ops_->device() == device_), "internal: a {} pipeline wire needs {}'s ops to pack it",
            precision_name(wire_), device_name(device_));
  OCC_CHECK(staged_ || links_.on_device || device_ == Device::Cpu,
            "internal: pipeline messages on {} must be staged for MPI", device_name(device_));
  OCC_CHECK(links_.complete(layout_.pp_rank, layout_.pp_size, layout_.vp_size > 1),
            "internal: stage {} lacks a pipeline link", layout_.pp_rank);
}

float* PipelineExchange::send_buffer(size_t count) { return device_out_.take(count); }

float* PipelineExchange::device_wire(size_t floats) {
  if (wire_buffer_.size() < floats) wire_buffer_.resize(floats);
  return wire_buffer_.data();
}

namespace {
// Floats (4-byte words) holding `bytes`: the buffers a message of that many bytes needs.
size_t words(size_t bytes) { return (bytes + sizeof(float) - 1) / sizeof(float); }
}  // namespace

// The peers wrap around (a ring) so interleaved chunks can pass from the last rank to the first.
PipelineExchange::Direction PipelineExchange::forward_out() const {
  return {(layout_.pp_rank + 1) % layout_.pp_size, links_.forward_out, Traffic::PipelineForward, "activations",
          "", "F"};
}
PipelineExchange::Direction PipelineExchange::forward_in() const {
  return {(layout_.pp_rank + layout_.pp_size - 1) % layout_.pp_size, links_.forward_in, Traffic::PipelineForward,
          "activations", "activations from the previous stage", "F"};
}
PipelineExchange::Direction PipelineExchange::backward_out() const {
  return {(layout_.pp_rank + layout_.pp_size - 1) % layout_.pp_size, links_.backward_out,
          Traffic::PipelineBackward, "activation gradients", "", "B"};
}
PipelineExchange::Direction PipelineExchange::backward_in() const {
  return {(layout_.pp_rank + 1) % layout_.pp_size, links_.backward_in, Traffic::PipelineBackward,
          "activation gradients", "activation gradients from the next stage", "B"};
}

std::string PipelineExchange::label(int mb, int chunk) const {
  return layout_.vp_size == 1 ? std::to_string(mb) : fmt::format("{}.c{}", mb, chunk);
}

void PipelineExchange::send(const Direction& d, const float* x, size_t count, int mb, int sender_chunk,
                            MessageCodec* encoder) {
  const size_t slice = count / size_t(layout_.tp_size);
  const float* message = x + slice * size_t(layout_.tp_rank);
  // The uncompressed message's bytes on this run's wire: what compression saves against.
  const size_t uncompressed = slice * wire_value_bytes(wire_);
  size_t bytes = uncompressed;
  const std::string name = d.letter + label(mb, sender_chunk);
  if (encoder) {
    const size_t floats = size_t(encoder->wire_floats());
    // The wire is the message in flight, except staged (copied out below):
    // on the device where the link sends device memory, or on the CPU.
    float* wire = staged_ ? device_wire(floats) : device_out_.take(floats);
    ScopedPhase t(timers_, "compress", "compress " + name);
    bytes = size_t(encoder->encode(message, wire, MessageId{iteration_, mb, sender_chunk})) *
            sizeof(float);  // (at most floats words)
    device_out_.give_back(x);  // read by the encoding, which later work on x follows
    message = wire;
  } else if (packed()) {
    // Values of the step's 16-bit format, packed on the device: exact.
    float* wire = staged_ ? device_wire(words(bytes)) : device_out_.take(words(bytes));
    ops_->copy(TensorRef(wire, wire_), message, int64_t(slice));
    device_out_.give_back(x);  // read by the packing, which later work on x follows
    message = wire;
  }
  if (staged_) {
    // Waits for the kernels that produce the message (core/host_staging.h).
    ScopedPhase t(timers_, "pp_stage");
    float* host = host_out_.take(words(bytes));
    device_copy(host, Device::Cpu, message, device_, bytes);
    device_out_.give_back(x);
    message = host;
  }
  const double t0 = now_seconds();
  OCC_CHECK(d.link, "internal: no pipeline link for the {} to stage {}", d.what, d.peer_stage);
  const uint64_t ticket = d.link->send_async(message, bytes, d.traffic, d.what);
  (staged_ ? host_out_.sending(message, d.link, ticket) : device_out_.sending(message, d.link, ticket));
  if (encoder) counters_.add_saved(d.traffic, int64_t(uncompressed) - int64_t(bytes));
  timers_.add_event("send " + name + (encoder ? " (compressed)" : ""), t0, now_seconds());
}

void PipelineExchange::recv(const Direction& d, float* x, size_t count, int mb, int sender_chunk,
                            const MessageCodec* decoder) {
  const size_t slice = count / size_t(layout_.tp_size);
  float* part = x + slice * size_t(layout_.tp_rank);
  const bool unpack = !decoder && packed();
  // A variable-size codec's message: up to this many bytes; `bytes` becomes what came.
  size_t bytes = decoder ? size_t(decoder->wire_floats()) * sizeof(float) : slice * wire_value_bytes(wire_);
  const size_t floats = words(bytes);
  const std::string name = d.letter + label(mb, sender_chunk);
  const std::string event = "recv " + name + (decoder ? " (compressed)" : "");
  // Received in place where the slice is in the link's memory and the message arrives as it is.
  float* message = part;
  if (links_.on_device) {
    if (decoder || unpack) message = device_wire(floats);
  } else if (staged_ || decoder || unpack) {
    inbox_.reserve(floats);
    message = inbox_.data();
  }
  OCC_CHECK(d.link, "internal: no pipeline link for the {}", d.recv_what);
  {
    ScopedPhase t(timers_, "pp_wait", event);
    if (decoder && decoder->variable_size())
      bytes = d.link->recv_upto(message, bytes, d.recv_what);
    else
      d.link->recv(message, bytes, d.recv_what);
  }
  if (staged_) {
    ScopedPhase t(timers_, "pp_stage");
    float* on_device = decoder || unpack ? device_wire(floats) : part;
    device_copy(on_device, device_, message, Device::Cpu, bytes);
    message = on_device;
  }
  if (decoder) {
    ScopedPhase t(timers_, "decompress", "decompress " + name);
    decoder->decode(message, int64_t(words(bytes)), part, MessageId{iteration_, mb, sender_chunk});
  } else if (unpack) {
    ops_->copy(part, ConstTensorRef(message, wire_), int64_t(slice));  // widened exactly
  }
  gather_slice(x, count);
}

void PipelineExchange::gather_slice(float* x, size_t count) {
  // Sequence parallel: the stage's rows are its slice, the message as it came.
  if (layout_.tp_size == 1 || sequence_parallel_) return;
  const size_t slice = count / size_t(layout_.tp_size);
  ScopedPhase t(timers_, "tp_allgather");
  const float* mine = x + slice * size_t(layout_.tp_rank);
  if (!packed()) {
    tp_.allgather(mine, x, slice, Traffic::TensorParallel);
    return;
  }
  // On the 16-bit wire too: a received message is of the format, and a decoded
  // one is rounded to it here instead of by the stage (the same values).
  wire_allgather(tp_, *ops_, x, mine, int64_t(slice), wire_, Traffic::TensorParallel, gather_scratch_);
}

void PipelineExchange::send_forward(const float* x, size_t count, int mb, int chunk, MessageCodec* encoder) {
  send(forward_out(), x, count, mb, chunk, encoder);
}
void PipelineExchange::send_backward(const float* dx, size_t count, int mb, int chunk, MessageCodec* encoder) {
  send(backward_out(), dx, count, mb, chunk, encoder);
}
void PipelineExchange::recv_forward(float* x, size_t count, int mb, int chunk, const MessageCodec* decoder) {
  recv(forward_in(), x, count, mb, forward_sender_chunk(layout_.pp_rank, chunk), decoder);
}
void PipelineExchange::recv_backward(float* dx, size_t count, int mb, int chunk, const MessageCodec* decoder) {
  recv(backward_in(), dx, count, mb, backward_sender_chunk(layout_.pp_size, layout_.pp_rank, chunk), decoder);
}

void PipelineExchange::wait_sends() {
  ScopedPhase t(timers_, "pp_wait", "wait sends");
  for (PipelineLink* link : {links_.forward_out, links_.backward_out})
    if (link) link->wait_sends();
  device_out_.all_sent();
  host_out_.all_sent();
}

}  // namespace occ
