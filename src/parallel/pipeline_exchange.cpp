#include "parallel/pipeline_exchange.h"

namespace occ {

namespace {
int forward_tag(int mb) { return 2 * mb; }
int backward_tag(int mb) { return 2 * mb + 1; }
}  // namespace

PipelineExchange::PipelineExchange(MpiCommunicator& pp, MpiCommunicator& tp, const ParallelLayout& layout,
                                   PhaseTimers& timers)
    : pp_(pp), tp_(tp), layout_(layout), timers_(timers) {}

void PipelineExchange::send(const float* x, size_t count, int peer_stage, int tag, Traffic traffic, const char* what,
                            const std::string& event) {
  const size_t slice = count / size_t(layout_.tp_size);
  const float* part = x + slice * size_t(layout_.tp_rank);
  const double t0 = now_seconds();
  pending_.push_back(pp_.isend(part, slice * sizeof(float), peer_stage, tag, traffic, what));
  timers_.add_event(event, t0, now_seconds());
}

void PipelineExchange::recv(float* x, size_t count, int peer_stage, int tag, const char* what,
                            const std::string& event) {
  const size_t slice = count / size_t(layout_.tp_size);
  float* part = x + slice * size_t(layout_.tp_rank);
  {
    ScopedPhase t(timers_, "pp_wait", event);
    auto r = pp_.irecv(part, slice * sizeof(float), peer_stage, tag, what);
    pp_.wait(r);
  }
  gather_slice(x, count);
}

void PipelineExchange::gather_slice(float* x, size_t count) {
  if (layout_.tp_size == 1) return;
  const size_t slice = count / size_t(layout_.tp_size);
  ScopedPhase t(timers_, "tp_allgather");
  tp_.allgather(x + slice * size_t(layout_.tp_rank), x, slice, Traffic::TensorParallel);
}

void PipelineExchange::send_forward(const float* x, size_t count, int mb) {
  send(x, count, layout_.pp_rank + 1, forward_tag(mb), Traffic::PipelineForward, "activations",
       fmt::format("send F{}", mb));
}
void PipelineExchange::send_backward(const float* dx, size_t count, int mb, MessageCodec* encoder) {
  if (!encoder) {
    send(dx, count, layout_.pp_rank - 1, backward_tag(mb), Traffic::PipelineBackward, "activation gradients",
         fmt::format("send B{}", mb));
    return;
  }
  const size_t slice = count / size_t(layout_.tp_size);
  if (wire_.size() <= size_t(mb)) wire_.resize(size_t(mb) + 1);
  auto& wire = wire_[size_t(mb)];
  wire.resize(size_t(encoder->wire_floats()));
  {
    ScopedPhase t(timers_, "compress", fmt::format("compress B{}", mb));
    encoder->encode(dx + slice * size_t(layout_.tp_rank), wire.data());
  }
  const double t0 = now_seconds();
  pending_.push_back(pp_.isend(wire.data(), wire.size() * sizeof(float), layout_.pp_rank - 1, backward_tag(mb),
                               Traffic::PipelineBackward, "compressed activation gradients"));
  pp_.counters().add_saved(Traffic::PipelineBackward, int64_t(slice * sizeof(float)) - int64_t(wire.size() * sizeof(float)));
  timers_.add_event(fmt::format("send B{} (compressed)", mb), t0, now_seconds());
}
void PipelineExchange::recv_forward(float* x, size_t count, int mb) {
  recv(x, count, layout_.pp_rank - 1, forward_tag(mb), "activations from the previous stage",
       fmt::format("recv F{}", mb));
}
void PipelineExchange::recv_backward(float* dx, size_t count, int mb, const MessageCodec* decoder) {
  if (!decoder) {
    recv(dx, count, layout_.pp_rank + 1, backward_tag(mb), "activation gradients from the next stage",
         fmt::format("recv B{}", mb));
    return;
  }
  const size_t slice = count / size_t(layout_.tp_size);
  recv_wire_.resize(size_t(decoder->wire_floats()));
  {
    ScopedPhase t(timers_, "pp_wait", fmt::format("recv B{} (compressed)", mb));
    auto r = pp_.irecv(recv_wire_.data(), recv_wire_.size() * sizeof(float), layout_.pp_rank + 1, backward_tag(mb),
                       "compressed activation gradients from the next stage");
    pp_.wait(r);
  }
  {
    ScopedPhase t(timers_, "decompress", fmt::format("decompress B{}", mb));
    decoder->decode(recv_wire_.data(), dx + slice * size_t(layout_.tp_rank));
  }
  gather_slice(dx, count);
}

void PipelineExchange::wait_sends() {
  ScopedPhase t(timers_, "pp_wait", "wait sends");
  pp_.wait_all(pending_);
  pending_.clear();
}

}  // namespace occ
