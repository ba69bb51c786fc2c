#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <cstddef>

#include "core/error.h"

namespace occ {

std::vector<PipelineOp> one_f_one_b(int num_stages, int stage, int num_micro_batches) {
  const int M = num_micro_batches, w = warmup_forwards(num_stages, stage, M);
  std::vector<PipelineOp> ops;
  ops.reserve(std::size_t(2 * M));
  for (int i = 0; i < w; ++i) ops.push_back({PipelineOp::Forward, i});
  for (int i = 0; i < M - w; ++i) {
    ops.push_back({PipelineOp::Forward, w + i});
    ops.push_back({PipelineOp::Backward, i});
  }
  for (int i = M - w; i < M; ++i) ops.push_back({PipelineOp::Backward, i});
  return ops;
}

int interleaved_warmup_forwards(int num_stages, int num_chunks, int stage, int num_micro_batches) {
  const int P = num_stages, V = num_chunks, M = num_micro_batches, total = M * V;
  // With exactly P micro-batches every forward precedes every backward.
  if (M == P) return total;
  return std::min((P - stage - 1) * 2 + (V - 1) * P, total);
}

std::vector<PipelineOp> interleaved_one_f_one_b(int num_stages, int num_chunks, int stage, int num_micro_batches) {
  const int P = num_stages, V = num_chunks, M = num_micro_batches;
  OCC_CHECK(P >= 1 && V >= 1 && M >= 1 && M % P == 0,
            "internal: interleaved schedule of {} micro-batches over {} stages", M, P);
  const int group = P * V, total = M * V;
  // Virtual micro-batch k: its chunk and its micro-batch within the chunk.
  auto op = [&](PipelineOp::Kind kind, int k) {
    const int in_group = k % group;
    int chunk = in_group / P;
    if (kind == PipelineOp::Backward) chunk = V - 1 - chunk;
    return PipelineOp{kind, (k / group) * P + in_group % P, chunk};
  };
  const int w = interleaved_warmup_forwards(P, V, stage, M);
  std::vector<PipelineOp> ops;
  ops.reserve(std::size_t(2 * total));
  for (int k = 0; k < w; ++k) ops.push_back(op(PipelineOp::Forward, k));
  for (int k = 0; k < total - w; ++k) {
    ops.push_back(op(PipelineOp::Forward, k + w));
    ops.push_back(op(PipelineOp::Backward, k));
  }
  for (int k = total - w; k < total; ++k) ops.push_back(op(PipelineOp::Backward, k));
  return ops;
}

std::vector<PipelineOp> pipeline_program(int num_stages, int num_chunks, int stage, int num_micro_batches) {
  if (num_chunks == 1) return one_f_one_b(num_stages, stage, num_micro_batches);
  return interleaved_one_f_one_b(num_stages, num_chunks, stage, num_micro_batches);
}

std::vector<PipelineOpTransfers> pipeline_transfers(int num_stages, int num_chunks, int stage,
                                                    int num_micro_batches) {
  const int P = num_stages, V = num_chunks, s = stage;
  const int next = (s + 1) % P, prev = (s + P - 1) % P;
  std::vector<PipelineOpTransfers> transfers;
  for (const PipelineOp& op : pipeline_program(P, V, s, num_micro_batches)) {
    const int c = op.chunk, mb = op.micro_batch, virtual_stage = c * P + s;
    const bool embedding = virtual_stage == 0, head = virtual_stage == V * P - 1;
    PipelineOpTransfers t;
    if (op.kind == PipelineOp::Forward) {
      t.has_recv = !embedding;
      t.recv = {true, prev, s, mb, forward_sender_chunk(s, c)};
      t.has_send = !head;
      t.send = {true, s, next, mb, c};
    } else {
      t.has_recv = !head;
      t.recv = {false, next, s, mb, backward_sender_chunk(P, s, c)};
      t.has_send = !embedding;
      t.send = {false, s, prev, mb, c};
    }
    transfers.push_back(t);
  }
  return transfers;
}

int max_in_flight(const std::vector<PipelineOp>& program) {
  int held = 0, most = 0;
  for (const PipelineOp& op : program) {
    held += op.kind == PipelineOp::Forward ? 1 : -1;
    most = std::max(most, held);
  }
  return most;
}

std::vector<std::vector<bool>> backwards_after_last_forward(const std::vector<PipelineOp>& program, int num_chunks,
                                                            int num_micro_batches) {
  std::vector<std::vector<bool>> after(static_cast<std::size_t>(num_chunks),
                                       std::vector<bool>(static_cast<std::size_t>(num_micro_batches), false));
  size_t last_forward = 0;
  for (size_t i = 0; i < program.size(); ++i)
    if (program[i].kind == PipelineOp::Forward) last_forward = i;
  for (size_t i = last_forward + 1; i < program.size(); ++i)
    if (program[i].kind == PipelineOp::Backward)
      after[std::size_t(program[i].chunk)][std::size_t(program[i].micro_batch)] = true;
  return after;
}

}  // namespace occ
