#pragma once
// The order of forwards and backwards one pipeline rank runs in an iteration.
//
// Non-interleaved 1F1B (PipeDream-Flush, as Megatron): stage s of P runs
// w = min(P - s - 1, M) warm-up forwards, then M - w steady one-forward-one-
// backward pairs, then w cool-down backwards (the epilogue).
//
// Interleaved 1F1B (Megatron's --num-layers-per-virtual-pipeline-stage): each
// rank holds V model chunks; chunk c of rank s is virtual stage c * P + s, so
// activations go round the ring of ranks V times. The rank's V * M forward
// "virtual micro-batches" k = 0, 1, ... visit the chunks in groups of P:
// chunk (k mod P V) / P, micro-batch (k / P V) * P + k mod P; backwards visit
// the chunks in reverse. The rank runs (P - s - 1) * 2 + (V - 1) * P warm-up
// forwards (all of them when M == P), then forward/backward pairs, then the
// cool-down backwards. M must be a multiple of P (Megatron's requirement).
#include <vector>

namespace occ {

struct PipelineOp {
  enum Kind { Forward, Backward } kind;
  int micro_batch;
  int chunk = 0;  // the model chunk (interleaved); 0 otherwise
  bool operator==(const PipelineOp&) const = default;
};

std::vector<PipelineOp> one_f_one_b(int num_stages, int stage, int num_micro_batches);
inline int warmup_forwards(int num_stages, int stage, int num_micro_batches) {
  int w = num_stages - stage - 1;
  return w < num_micro_batches ? w : num_micro_batches;
}

// Megatron's interleaved schedule over `num_chunks` >= 2 chunks per rank.
std::vector<PipelineOp> interleaved_one_f_one_b(int num_stages, int num_chunks, int stage, int num_micro_batches);
int interleaved_warmup_forwards(int num_stages, int num_chunks, int stage, int num_micro_batches);

// Which chunk of the neighbouring rank a message into `chunk` of `stage` comes
// from. Interleaved, the ranks form a ring: stage 0's chunk c takes its input
// from the last stage's chunk c - 1, and the last stage's chunk c its output
// gradient from stage 0's chunk c + 1; elsewhere the chunk is the same.
inline int forward_sender_chunk(int stage, int chunk) { return stage == 0 ? chunk - 1 : chunk; }
inline int backward_sender_chunk(int num_stages, int stage, int chunk) {
  return stage == num_stages - 1 ? chunk + 1 : chunk;
}

// The program of `stage`: one_f_one_b for one chunk, interleaved otherwise.
std::vector<PipelineOp> pipeline_program(int num_stages, int num_chunks, int stage, int num_micro_batches);

// One pipeline message: activations (forward) or activation gradients, from
// stage `sender` to stage `receiver`, of a micro-batch in the sender's chunk.
struct PipelineTransfer {
  bool forward;
  int sender, receiver, micro_batch, sender_chunk;
  bool operator==(const PipelineTransfer&) const = default;
};
// What an op of the program receives before its compute and sends after it
// (has_* false where its chunk holds the embedding or the head).
struct PipelineOpTransfers {
  bool has_recv = false, has_send = false;
  PipelineTransfer recv{}, send{};
};
// The transfers of each op of pipeline_program(...). On every link (a sender,
// a receiver and a direction) the sender sends its messages in the order the
// receiver receives them, so a link that delivers in order
// (parallel/pipeline_links.h) needs no message names; and with nonblocking
// sends and blocking receives no schedule can wait in a cycle. The executor
// runs this list, and tests/unit/test_pipeline_schedule.cpp checks both
// properties for every schedule.
std::vector<PipelineOpTransfers> pipeline_transfers(int num_stages, int num_chunks, int stage, int num_micro_batches);

// Micro-batches (of any chunk) whose activations the program holds at once:
// the activation slots it needs.
int max_in_flight(const std::vector<PipelineOp>& program);

// The rule by which EC picks its messages, for any schedule: the backward
// sends a rank makes after its last forward. [chunk][micro-batch] -> whether
// that backward comes after the program's last forward. For plain 1F1B these
// are the last min(P - s, M) backwards of stage s.
std::vector<std::vector<bool>> backwards_after_last_forward(const std::vector<PipelineOp>& program, int num_chunks,
                                                            int num_micro_batches);

}  // namespace occ
