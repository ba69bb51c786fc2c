#include "parallel/pipeline_exchange.h"

#include <fmt/format.h>

#include "parallel/pipeline_schedule.h"

namespace occ {

PipelineExchange::PipelineExchange(MpiCommunicator& pp, MpiCommunicator& tp, const ParallelLayout& layout,
                                   PhaseTimers& timers)
    : pp_(pp), tp_(tp), layout_(layout), timers_(timers) {}

// Tag 2 m + 0 forward, 2 m + 1 backward: the two directions never match each other.
// The peers wrap around (a ring) so interleaved chunks can pass from the last rank to the first.
PipelineExchange::Direction PipelineExchange::forward_out() const {
  return {(layout_.pp_rank + 1) % layout_.pp_size, 0, Traffic::PipelineForward, "activations", "", "F"};
}
PipelineExchange::Direction PipelineExchange::forward_in() const {
  return {(layout_.pp_rank + layout_.pp_size - 1) % layout_.pp_size, 0, Traffic::PipelineForward, "activations",
          "activations from the previous stage", "F"};
}
PipelineExchange::Direction PipelineExchange::backward_out() const {
  return {(layout_.pp_rank + layout_.pp_size - 1) % layout_.pp_size, 1, Traffic::PipelineBackward,
          "activation gradients", "", "B"};
}
PipelineExchange::Direction PipelineExchange::backward_in() const {
  return {(layout_.pp_rank + 1) % layout_.pp_size, 1, Traffic::PipelineBackward, "activation gradients",
          "activation gradients from the next stage", "B"};
}

std::string PipelineExchange::label(int mb, int chunk) const {
  return layout_.vp_size == 1 ? std::to_string(mb) : fmt::format("{}.c{}", mb, chunk);
}

void PipelineExchange::send(const Direction& d, const float* x, size_t count, int mb, int sender_chunk,
                            MessageCodec* encoder, std::vector<std::vector<float>>& wires) {
  const size_t slice = count / size_t(layout_.tp_size);
  const float* part = x + slice * size_t(layout_.tp_rank);
  const int tag = this->tag(d, mb, sender_chunk);
  const std::string name = d.letter + label(mb, sender_chunk);
  if (!encoder) {
    const double t0 = now_seconds();
    pending_.push_back(pp_.isend(part, slice * sizeof(float), d.peer_stage, tag, d.traffic, d.what));
    timers_.add_event("send " + name, t0, now_seconds());
    return;
  }
  const size_t message = size_t(mb) * size_t(layout_.vp_size) + size_t(sender_chunk);
  if (wires.size() <= message) wires.resize(message + 1);
  auto& wire = wires[message];
  wire.resize(size_t(encoder->wire_floats()));
  {
    ScopedPhase t(timers_, "compress", "compress " + name);
    encoder->encode(part, wire.data());
  }
  const double t0 = now_seconds();
  pending_.push_back(
      pp_.isend(wire.data(), wire.size() * sizeof(float), d.peer_stage, tag, d.traffic, d.what));
  pp_.counters().add_saved(d.traffic, int64_t(slice * sizeof(float)) - int64_t(wire.size() * sizeof(float)));
  timers_.add_event("send " + name + " (compressed)", t0, now_seconds());
}

void PipelineExchange::recv(const Direction& d, float* x, size_t count, int mb, int sender_chunk,
                            const MessageCodec* decoder) {
  const size_t slice = count / size_t(layout_.tp_size);
  float* part = x + slice * size_t(layout_.tp_rank);
  const int tag = this->tag(d, mb, sender_chunk);
  const std::string name = d.letter + label(mb, sender_chunk);
  if (!decoder) {
    ScopedPhase t(timers_, "pp_wait", "recv " + name);
    auto r = pp_.irecv(part, slice * sizeof(float), d.peer_stage, tag, d.recv_what);
    pp_.wait(r);
  } else {
    recv_wire_.resize(size_t(decoder->wire_floats()));
    {
      ScopedPhase t(timers_, "pp_wait", "recv " + name + " (compressed)");
      auto r = pp_.irecv(recv_wire_.data(), recv_wire_.size() * sizeof(float), d.peer_stage, tag, d.recv_what);
      pp_.wait(r);
    }
    ScopedPhase t(timers_, "decompress", "decompress " + name);
    decoder->decode(recv_wire_.data(), part);
  }
  gather_slice(x, count);
}

void PipelineExchange::gather_slice(float* x, size_t count) {
  if (layout_.tp_size == 1) return;
  const size_t slice = count / size_t(layout_.tp_size);
  ScopedPhase t(timers_, "tp_allgather");
  tp_.allgather(x + slice * size_t(layout_.tp_rank), x, slice, Traffic::TensorParallel);
}

void PipelineExchange::send_forward(const float* x, size_t count, int mb, int chunk, MessageCodec* encoder) {
  send(forward_out(), x, count, mb, chunk, encoder, forward_wire_);
}
void PipelineExchange::send_backward(const float* dx, size_t count, int mb, int chunk, MessageCodec* encoder) {
  send(backward_out(), dx, count, mb, chunk, encoder, backward_wire_);
}
void PipelineExchange::recv_forward(float* x, size_t count, int mb, int chunk, const MessageCodec* decoder) {
  recv(forward_in(), x, count, mb, forward_sender_chunk(layout_.pp_rank, chunk), decoder);
}
void PipelineExchange::recv_backward(float* dx, size_t count, int mb, int chunk, const MessageCodec* decoder) {
  recv(backward_in(), dx, count, mb, backward_sender_chunk(layout_.pp_size, layout_.pp_rank, chunk), decoder);
}

void PipelineExchange::wait_sends() {
  ScopedPhase t(timers_, "pp_wait", "wait sends");
  pp_.wait_all(pending_);
  pending_.clear();
}

}  // namespace occ
