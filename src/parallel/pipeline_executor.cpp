#include "parallel/pipeline_executor.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "core/heartbeat.h"
#include "parallel/pipeline_schedule.h"

namespace occ {

PipelineExecutor::PipelineExecutor(const ParallelLayout& layout, PipelineExchange& exchange, PhaseTimers& timers,
                                   BackwardCompression compression, ForwardCompression forward)
    : layout_(layout),
      exchange_(exchange),
      timers_(timers),
      compression_(std::move(compression)),
      forward_(forward),
      x_in_(exchange.device()),
      dx_out_(exchange.device()) {}

int PipelineExecutor::slots(int M) const {
  return max_in_flight(pipeline_program(layout_.pp_size, layout_.vp_size, layout_.pp_rank, M));
}

bool PipelineExecutor::compresses(bool after_last_forward) const {
  return compression_.compresses && compression_.compresses(after_last_forward);
}

void PipelineExecutor::run(int M, size_t count, const MicroBatchSteps& steps) {
  // No GPU free while this rank's sends may be queued on NCCL links (core/device.h).
  std::optional<DeferredDeviceFrees> no_frees_until_sends_have_gone;
  if (exchange_.sends_from_device()) no_frees_until_sends_have_gone.emplace();
  const int P = layout_.pp_size, s = layout_.pp_rank, V = layout_.vp_size;
  const std::vector<PipelineOp> program = pipeline_program(P, V, s, M);
  // What each op receives and sends: in the order its peers expect (pipeline_schedule.h).
  const std::vector<PipelineOpTransfers> transfers = pipeline_transfers(P, V, s, M);
  // EC's rule for the sends of this rank and for those of the next rank, whose
  // backward messages this one receives (the next virtual stage's sender).
  const auto sent_late = backwards_after_last_forward(program, V, M);
  const int next = (s + 1) % P;
  const auto received_late = backwards_after_last_forward(pipeline_program(P, V, next, M), V, M);
  auto message = [M](int chunk, int mb) { return size_t(chunk) * size_t(M) + size_t(mb); };
  x_in_.resize(count);
  dx_out_.resize(count);
  // Activation slots: taken by a forward, given back by its backward (lowest first).
  std::vector<int> free_slots(size_t(max_in_flight(program)));
  for (size_t i = 0; i < free_slots.size(); ++i) free_slots[i] = int(free_slots.size() - 1 - i);
  std::vector<int> slot_of(size_t(V) * size_t(M), -1);

  // Times a compute scope excluding the TP collectives inside it, and the
  // waits for parameters still being all-gathered (--overlap-param-gather).
  auto inside = [&] { return timers_.ms("tp_allreduce") + timers_.ms("dp_allgather"); };
  auto compute = [&](const char* phase, const std::string& event, auto&& body) {
    const double t0 = now_seconds(), in0 = inside();
    body();
    const double t1 = now_seconds();
    timers_.add(phase, (t1 - t0) - (inside() - in0) / 1e3);
    timers_.add_event(event, t0, t1);
  };

  for (size_t i = 0; i < program.size(); ++i) {
    const PipelineOp& op = program[i];
    const PipelineOpTransfers& t = transfers[i];
    const int j = op.micro_batch, c = op.chunk;
    const std::string name = exchange_.label(j, c);
    heartbeat::phase(op.kind == PipelineOp::Forward ? "forward" : "backward", j, c);
    if (op.kind == PipelineOp::Forward) {
      const int slot = free_slots.back();
      free_slots.pop_back();
      slot_of[message(c, j)] = slot;
      {
        ScopedPhase t(timers_, "data");
        steps.load(j, slot, c);
      }
      if (t.has_recv) exchange_.recv_forward(x_in_.data(), count, j, c, forward_.recv);
      float* out = t.has_send ? exchange_.send_buffer(count) : nullptr;  // (the head's forward writes no y)
      compute("forward", "F" + name, [&] { steps.forward(j, slot, c, x_in_.data(), out); });
      if (t.has_send) exchange_.send_forward(out, count, j, c, forward_.send);
    } else {
      const int slot = slot_of[message(c, j)];
      if (t.has_recv) {
        // CB/EC: whether the sender (the next virtual stage) compressed it, from its schedule.
        const int sender_chunk = t.recv.sender_chunk;
        const bool compressed_in = compresses(received_late[size_t(sender_chunk)][size_t(j)]);
        exchange_.recv_backward(dx_out_.data(), count, j, c,
                                compressed_in ? compression_.recv[size_t(c)] : nullptr);
      }
      float* out = t.has_send ? exchange_.send_buffer(count) : nullptr;  // (the embedding's backward writes no dx)
      compute("backward", "B" + name, [&] { steps.backward(j, slot, c, dx_out_.data(), out, j == M - 1); });
      if (t.has_send) {
        const bool compressed_out = compresses(sent_late[size_t(c)][size_t(j)]);
        if (compressed_out && steps.before_compressed_send) steps.before_compressed_send(j, slot, c, out);
        exchange_.send_backward(out, count, j, c, compressed_out ? compression_.send[size_t(c)] : nullptr);
        timers_.count("cb_sends", 1);
        timers_.count("cb_compressed", compressed_out ? 1 : 0);
      }
      free_slots.push_back(slot);
    }
  }
  heartbeat::phase("pipeline sends");
  exchange_.wait_sends();
}

}  // namespace occ
