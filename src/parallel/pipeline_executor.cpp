#include "parallel/pipeline_executor.h"

#include <algorithm>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "parallel/pipeline_schedule.h"

namespace occ {

PipelineExecutor::PipelineExecutor(const ParallelLayout& layout, PipelineExchange& exchange, PhaseTimers& timers,
                                   BackwardCompression compression, ForwardCompression forward)
    : layout_(layout), exchange_(exchange), timers_(timers), compression_(std::move(compression)), forward_(forward) {}

int PipelineExecutor::slots(int M) const { return std::min(layout_.pp_size - layout_.pp_rank, M); }

bool PipelineExecutor::compresses(int sender, int M, int mb) const {
  return compression_.compresses && compression_.compresses(layout_.pp_size, sender, M, mb);
}

double PipelineExecutor::run(int M, size_t count, const MicroBatchSteps& steps) {
  const int P = layout_.pp_size, s = layout_.pp_rank;
  const int pool = slots(M);
  fwd_send_.resize(size_t(M));
  bwd_send_.resize(size_t(M));
  x_in_.resize(count);
  dx_out_.resize(count);
  double loss_sum = 0.0;

  // Times a compute scope excluding the TP collectives inside it.
  auto compute = [&](const char* phase, const std::string& event, auto&& body) {
    const double t0 = now_seconds(), tp0 = timers_.ms("tp_allreduce");
    body();
    const double t1 = now_seconds();
    timers_.add(phase, (t1 - t0) - (timers_.ms("tp_allreduce") - tp0) / 1e3);
    timers_.add_event(event, t0, t1);
  };

  for (const PipelineOp& op : one_f_one_b(P, s, M)) {
    const int j = op.micro_batch, slot = j % pool;
    if (op.kind == PipelineOp::Forward) {
      {
        ScopedPhase t(timers_, "data");
        steps.load(j, slot);
      }
      if (!layout_.first_stage()) exchange_.recv_forward(x_in_.data(), count, j, forward_.recv);
      auto& out = fwd_send_[size_t(j)];
      out.resize(layout_.last_stage() ? 0 : count);
      compute("forward", fmt::format("F{}", j), [&] { loss_sum += steps.forward(j, slot, x_in_.data(), out.data()); });
      if (!layout_.last_stage()) exchange_.send_forward(out.data(), count, j, forward_.send);
    } else {
      // CB/EC: sender and receiver derive from the schedule whether this message is compressed.
      const bool compressed_in = compresses(s + 1, M, j);
      const bool compressed_out = compresses(s, M, j);
      if (!layout_.last_stage())
        exchange_.recv_backward(dx_out_.data(), count, j, compressed_in ? compression_.recv : nullptr);
      auto& out = bwd_send_[size_t(j)];
      out.resize(layout_.first_stage() ? 0 : count);
      compute("backward", fmt::format("B{}", j),
              [&] { steps.backward(j, slot, dx_out_.data(), out.data(), j == M - 1); });
      if (!layout_.first_stage()) {
        if (compressed_out && steps.before_compressed_send) steps.before_compressed_send(j, slot, out.data());
        exchange_.send_backward(out.data(), count, j, compressed_out ? compression_.send : nullptr);
        timers_.count("cb_sends", 1);
        timers_.count("cb_compressed", compressed_out ? 1 : 0);
      }
    }
  }
  exchange_.wait_sends();
  return loss_sum;
}

}  // namespace occ
