// The pipeline programs: plain 1F1B, Megatron's interleaved 1F1B, and EC's
// general rule (the backward sends after a rank's last forward).
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "compress/compressed_backprop.h"
#include "compress/compression_state.h"
#include "core/tensor_file.h"
#include "parallel/pipeline_schedule.h"
#include "temp_dir.h"

namespace occ {
namespace {

using Op = PipelineOp;
constexpr auto F = PipelineOp::Forward;
constexpr auto B = PipelineOp::Backward;

TEST(PipelineSchedule, InterleavedMatchesMegatronOrderByHand) {
  // P = 2, V = 2, M = 4 (Megatron's diagram): rank 0 warms up with 4 forwards
  // ((P - 1) * 2 + (V - 1) * P), rank 1 with 2.
  const std::vector<Op> rank0 = {{F, 0, 0}, {F, 1, 0}, {F, 0, 1}, {F, 1, 1}, {F, 2, 0}, {B, 0, 1},
                                 {F, 3, 0}, {B, 1, 1}, {F, 2, 1}, {B, 0, 0}, {F, 3, 1}, {B, 1, 0},
                                 {B, 2, 1}, {B, 3, 1}, {B, 2, 0}, {B, 3, 0}};
  const std::vector<Op> rank1 = {{F, 0, 0}, {F, 1, 0}, {F, 0, 1}, {B, 0, 1}, {F, 1, 1}, {B, 1, 1},
                                 {F, 2, 0}, {B, 0, 0}, {F, 3, 0}, {B, 1, 0}, {F, 2, 1}, {B, 2, 1},
                                 {F, 3, 1}, {B, 3, 1}, {B, 2, 0}, {B, 3, 0}};
  EXPECT_EQ(interleaved_one_f_one_b(2, 2, 0, 4), rank0);
  EXPECT_EQ(interleaved_one_f_one_b(2, 2, 1, 4), rank1);
  EXPECT_EQ(pipeline_program(2, 2, 0, 4), rank0);
  EXPECT_EQ(pipeline_program(3, 1, 1, 5), one_f_one_b(3, 1, 5));
  // M == P: every forward before any backward.
  const auto all = interleaved_one_f_one_b(2, 2, 1, 2);
  EXPECT_EQ(interleaved_warmup_forwards(2, 2, 1, 2), 4);
  EXPECT_TRUE(std::all_of(all.begin(), all.begin() + 4, [](const Op& o) { return o.kind == F; }));
}

// Runs every rank's transfers (pipeline_transfers, what the executor runs)
// as the engine does: sends nonblocking, receives blocking, each link (a
// sender, a receiver and a direction) delivering its messages in the order
// they were sent, as an NCCL link or MPI with one tag per direction does.
// Returns "" when every rank finishes, every receive gets the message it
// expects and no message is left unreceived (wait_sends would hang); else what
// went wrong. device_waits[s]: ops of stage s whose compute waits, after the
// op's receive, until every message the stage has sent so far has been
// received (what a GPU-wide wait does while NCCL sends are queued).
using Transfers = std::vector<std::vector<PipelineOpTransfers>>;  // per stage
std::string run_links(const Transfers& program, const std::vector<std::set<size_t>>& device_waits = {}) {
  const int P = int(program.size());
  using Link = std::tuple<bool, int, int>;  // forward, sender, receiver
  std::map<Link, std::vector<PipelineTransfer>> sent;
  std::map<Link, size_t> received;
  auto link = [](const PipelineTransfer& t) { return Link{t.forward, t.sender, t.receiver}; };
  auto all_sends_received = [&](int s) {
    for (const auto& [l, queue] : sent)
      if (std::get<1>(l) == s && received[l] < queue.size()) return false;
    return true;
  };
  std::vector<size_t> pc(size_t(P), 0);
  std::vector<bool> got_input(size_t(P), false);  // the op at pc has done its receive
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < P; ++s) {
      for (size_t& i = pc[size_t(s)]; i < program[size_t(s)].size(); ++i, progress = true) {
        const PipelineOpTransfers& op = program[size_t(s)][i];
        if (op.has_recv && !got_input[size_t(s)]) {
          const std::vector<PipelineTransfer>& queue = sent[link(op.recv)];
          size_t& next = received[link(op.recv)];
          if (next == queue.size()) break;  // blocked until the sender gets there
          const PipelineTransfer& got = queue[next++];
          if (!(got == op.recv))
            return "stage " + std::to_string(s) + " op " + std::to_string(i) + " received mb " +
                   std::to_string(got.micro_batch) + " chunk " + std::to_string(got.sender_chunk) +
                   ", expected mb " + std::to_string(op.recv.micro_batch) + " chunk " +
                   std::to_string(op.recv.sender_chunk);
          got_input[size_t(s)] = true;
          progress = true;
        }
        if (size_t(s) < device_waits.size() && device_waits[size_t(s)].count(i) && !all_sends_received(s)) break;
        got_input[size_t(s)] = false;
        if (op.has_send) sent[link(op.send)].push_back(op.send);
      }
    }
  }
  for (int s = 0; s < P; ++s)
    if (pc[size_t(s)] != program[size_t(s)].size())
      return "deadlock: stage " + std::to_string(s) + " stopped at op " + std::to_string(pc[size_t(s)]);
  for (const auto& [l, queue] : sent)
    if (received[l] != queue.size()) return "a message nobody receives";
  return "";
}
Transfers transfers(int P, int V, int M) {
  Transfers program;
  for (int s = 0; s < P; ++s) program.push_back(pipeline_transfers(P, V, s, M));
  return program;
}
std::string run_links(int P, int V, int M) { return run_links(transfers(P, V, M)); }

TEST(PipelineSchedule, InterleavedIsCompleteOrderedAndDeadlockFree) {
  for (int P : {2, 3, 4, 8})
    for (int V : {2, 3, 4})
      for (int M : {P, 2 * P, 3 * P, 8 * P}) {
        SCOPED_TRACE(testing::Message() << "P " << P << " V " << V << " M " << M);
        for (int s = 0; s < P; ++s) {
          const auto ops = interleaved_one_f_one_b(P, V, s, M);
          ASSERT_EQ(ops.size(), size_t(2 * V * M));
          std::map<std::pair<int, int>, int> fwd;
          int warm = 0;
          bool seen_backward = false;
          for (size_t i = 0; i < ops.size(); ++i) {
            const auto key = std::make_pair(ops[i].chunk, ops[i].micro_batch);
            if (ops[i].kind == F) {
              EXPECT_TRUE(fwd.emplace(key, int(i)).second);
              warm += !seen_backward;
            } else {
              seen_backward = true;
              ASSERT_TRUE(fwd.count(key));
              EXPECT_LT(fwd[key], int(i));
            }
          }
          EXPECT_EQ(int(fwd.size()), V * M);
          // Forwards before the first backward: the warm-up plus the first steady forward.
          const int w = interleaved_warmup_forwards(P, V, s, M);
          EXPECT_EQ(w, M == P ? V * M : std::min((P - s - 1) * 2 + (V - 1) * P, V * M));
          EXPECT_EQ(warm, std::min(w + 1, V * M));
          EXPECT_EQ(max_in_flight(ops), std::min(w + 1, V * M));
          // Each chunk's micro-batches run forward in order, and backward in order.
          for (int c = 0; c < V; ++c) {
            int nf = 0, nb = 0;
            for (const Op& o : ops)
              if (o.chunk == c) {
                EXPECT_EQ(o.micro_batch, o.kind == F ? nf++ : nb++);
              }
          }
        }
        EXPECT_EQ(run_links(P, V, M), "");
      }
  for (int P : {1, 2, 4, 7})
    for (int M : {1, 3, 8}) EXPECT_EQ(run_links(P, 1, M), "") << P << " " << M;
}

// The alternative the NCCL links do not take (parallel/pipeline_links.h):
// Megatron's pairing, where a rank's send goes out in one NCCL group with its
// next receive and the rank waits for the whole group (so a send completes
// before the rank computes again). Returns whether every rank finishes. A
// group completes once each of its messages' other ends has been posted.
bool runs_with_sends_grouped_with_the_next_receive(int P, int V, int M) {
  using Message = std::tuple<bool, int, int, int>;  // forward, sender, receiver, index on the link
  struct Group {
    std::vector<Message> sends, recvs;
  };
  std::vector<std::vector<Group>> groups(static_cast<size_t>(P));
  for (int s = 0; s < P; ++s) {
    std::map<std::tuple<bool, int, int>, int> sent, received;
    auto index = [](auto& counts, const PipelineTransfer& t) { return counts[{t.forward, t.sender, t.receiver}]++; };
    Group pending;
    for (const PipelineOpTransfers& op : pipeline_transfers(P, V, s, M)) {
      if (op.has_recv) {
        pending.recvs.push_back({op.recv.forward, op.recv.sender, op.recv.receiver, index(received, op.recv)});
        groups[size_t(s)].push_back(pending);
        pending = {};
      } else if (!pending.sends.empty()) {
        groups[size_t(s)].push_back(pending);  // no receive to pair with: the send alone, before computing
        pending = {};
      }
      if (op.has_send)
        pending.sends.push_back({op.send.forward, op.send.sender, op.send.receiver, index(sent, op.send)});
    }
    if (!pending.sends.empty()) groups[size_t(s)].push_back(pending);
  }
  std::vector<size_t> at(size_t(P), 0);
  std::set<std::pair<bool, Message>> posted;  // (is a send, message) of the groups reached so far
  auto post = [&](int s) {
    if (at[size_t(s)] == groups[size_t(s)].size()) return;
    for (const Message& m : groups[size_t(s)][at[size_t(s)]].sends) posted.insert({true, m});
    for (const Message& m : groups[size_t(s)][at[size_t(s)]].recvs) posted.insert({false, m});
  };
  for (int s = 0; s < P; ++s) post(s);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < P; ++s) {
      if (at[size_t(s)] == groups[size_t(s)].size()) continue;
      const Group& g = groups[size_t(s)][at[size_t(s)]];
      bool done = true;
      for (const Message& m : g.sends) done = done && posted.count({false, m});
      for (const Message& m : g.recvs) done = done && posted.count({true, m});
      if (!done) continue;
      ++at[size_t(s)];
      post(s);
      progress = true;
    }
  }
  for (int s = 0; s < P; ++s)
    if (at[size_t(s)] != groups[size_t(s)].size()) return false;
  return true;
}

TEST(PipelineSchedule, WhyNcclLinksQueueSendsRatherThanPairThemWithReceives) {
  // Plain 1F1B would run either way: the pairs are Megatron's
  // send_forward_recv_backward and send_backward_recv_forward.
  for (int P = 1; P <= 8; ++P)
    for (int M = 1; M <= 3 * P; ++M) EXPECT_TRUE(runs_with_sends_grouped_with_the_next_receive(P, 1, M)) << P << " " << M;
  // Interleaved with more micro-batches than stages, pairing each send with
  // the next receive leaves neighbours waiting on each other (Megatron's
  // interleaved schedule pairs its messages differently); with M == P every
  // forward comes first and it runs. Queued sends run all of them
  // (EveryLinkDeliversInTheOrderItIsReceived).
  for (int P = 2; P <= 6; ++P)
    for (int V = 2; V <= 4; ++V) {
      EXPECT_TRUE(runs_with_sends_grouped_with_the_next_receive(P, V, P)) << P << " " << V;
      for (int M = 2 * P; M <= 4 * P; M += P)
        EXPECT_FALSE(runs_with_sends_grouped_with_the_next_receive(P, V, M)) << P << " " << V << " " << M;
    }
}

TEST(PipelineSchedule, EveryLinkDeliversInTheOrderItIsReceived) {
  // Every layout a job can have up to 8 stages: plain 1F1B at any M, and
  // interleaved (M a multiple of P). Each stage's messages per link, counted.
  for (int P = 1; P <= 8; ++P)
    for (int V = 1; V <= 4; ++V)
      for (int M = 1; M <= 3 * P; ++M) {
        if (V > 1 && (P < 2 || M % P != 0)) continue;
        SCOPED_TRACE(testing::Message() << "P " << P << " V " << V << " M " << M);
        EXPECT_EQ(run_links(P, V, M), "");
        int sends = 0, recvs = 0;
        for (int s = 0; s < P; ++s)
          for (const PipelineOpTransfers& t : pipeline_transfers(P, V, s, M)) {
            sends += t.has_send;
            recvs += t.has_recv;
          }
        // Each micro-batch crosses V P - 1 virtual-stage boundaries each way.
        EXPECT_EQ(sends, 2 * M * (V * P - 1));
        EXPECT_EQ(recvs, sends);
      }
  // The check can fail. Stage 0 of P2 M3 sends micro-batches 0 and 1 forward
  // in its first two ops: swapped, stage 1 receives 1 where it expects 0.
  Transfers swapped = transfers(2, 1, 3);
  ASSERT_TRUE(swapped[0][0].has_send && swapped[0][1].has_send);
  std::swap(swapped[0][0].send, swapped[0][1].send);
  EXPECT_EQ(run_links(swapped), "stage 1 op 0 received mb 1 chunk 0, expected mb 0 chunk 0");
  // The last forward send dropped (op 3: F2): stage 1 waits for it for ever.
  Transfers dropped = transfers(2, 1, 3);
  ASSERT_TRUE(dropped[0][3].has_send && dropped[0][3].send.micro_batch == 2);
  dropped[0][3].has_send = false;
  EXPECT_NE(run_links(dropped).find("deadlock"), std::string::npos) << run_links(dropped);
}

// Why a job on NCCL has CUDA load its kernels eagerly (core/cuda_module_loading.h):
// under lazy loading a kernel's first launch waits for the whole GPU, queued
// NCCL sends included, and a send finishes only when its receiver gets there.
// Where every stage first launches kernels at its first forward and first
// backward of each chunk, the schedule still runs. But a kernel first used in
// the steady state (a compressor starting after its warm-up, EC compressing
// only the cool-down's sends, the first overflow of the loss scale) waits
// there: at op 6 of interleaved P2 V2 M4 stage 0 (forward of chunk 0, micro-batch 3)
// waits for its gradient to stage 1 (sent at op 5), which stage 1 receives at
// op 7, while stage 1 waits at its op 6 for its gradient to stage 0, which
// stage 0 receives at its op 7.
TEST(PipelineSchedule, WhyNcclJobsLoadKernelsEagerly) {
  for (int P = 2; P <= 8; ++P)
    for (int V = 1; V <= 4; ++V)
      for (int M = 1; M <= 3 * P; ++M) {
        if (V > 1 && M % P != 0) continue;
        std::vector<std::set<size_t>> first_of_kind(static_cast<size_t>(P));
        for (int s = 0; s < P; ++s) {
          std::set<std::pair<int, int>> seen;  // (kind, chunk)
          const std::vector<PipelineOp> ops = pipeline_program(P, V, s, M);
          for (size_t i = 0; i < ops.size(); ++i)
            if (seen.insert({ops[i].kind, ops[i].chunk}).second) first_of_kind[size_t(s)].insert(i);
        }
        EXPECT_EQ(run_links(transfers(P, V, M), first_of_kind), "") << P << " " << V << " " << M;
      }
  const std::vector<std::set<size_t>> at_op_6{{6}, {6}};
  EXPECT_EQ(run_links(transfers(2, 2, 4), at_op_6), "deadlock: stage 0 stopped at op 6");
  // Plain 1F1B survives such a wait at any one op on every stage (its
  // neighbours never wait on each other's gradients and activations at once);
  // the interleaved ring does not.
  for (int P = 2; P <= 8; ++P)
    for (int M = 1; M <= 3 * P; ++M)
      for (size_t i = 0; i < size_t(2 * M); ++i)
        EXPECT_EQ(run_links(transfers(P, 1, M), std::vector<std::set<size_t>>(size_t(P), {i})), "")
            << P << " " << M << " " << i;
}

TEST(PipelineSchedule, EcRuleReproducesTheLastPMinusSSendsOfPlain1F1B) {
  for (int P : {1, 2, 3, 4, 6})
    for (int M : {1, 2, 3, 4, 5, 6, 8, 13})
      for (int s = 0; s < P; ++s) {
        const auto late = backwards_after_last_forward(one_f_one_b(P, s, M), 1, M);
        for (int mb = 0; mb < M; ++mb)
          EXPECT_EQ(late[0][size_t(mb)], mb >= M - (P - s)) << "P " << P << " M " << M << " s " << s << " mb " << mb;
      }
}

TEST(PipelineSchedule, EcRuleUnderInterleaving) {
  // P = 2, V = 2, M = 4: rank 0's last forward is F3.c1 at position 10; after
  // it come B1.c0, B2.c1, B3.c1, B2.c0, B3.c0. Chunk 0 of rank 0 sends nothing,
  // so rank 0 compresses B2.c1 and B3.c1; rank 1 (last forward F3.c1 at 12)
  // compresses B3.c1, B2.c0, B3.c0.
  const auto r0 = backwards_after_last_forward(interleaved_one_f_one_b(2, 2, 0, 4), 2, 4);
  const auto r1 = backwards_after_last_forward(interleaved_one_f_one_b(2, 2, 1, 4), 2, 4);
  EXPECT_EQ(r0[0], (std::vector<bool>{false, true, true, true}));
  EXPECT_EQ(r0[1], (std::vector<bool>{false, false, true, true}));
  EXPECT_EQ(r1[0], (std::vector<bool>{false, false, true, true}));
  EXPECT_EQ(r1[1], (std::vector<bool>{false, false, false, true}));
  // In general: exactly the backwards after the last forward, whatever their chunk.
  for (int P : {2, 4})
    for (int V : {2, 3})
      for (int M : {P, 2 * P, 4 * P})
        for (int s = 0; s < P; ++s) {
          const auto ops = interleaved_one_f_one_b(P, V, s, M);
          const auto late = backwards_after_last_forward(ops, V, M);
          int n = 0;
          for (const auto& chunk : late) n += int(std::count(chunk.begin(), chunk.end(), true));
          const auto last_f = std::find_if(ops.rbegin(), ops.rend(), [](const Op& o) { return o.kind == F; });
          EXPECT_EQ(n, int(last_f - ops.rbegin()));
        }
}

TEST(PipelineSchedule, BackpropLinksPerChunk) {
  CompressedBackpropConfig cfg;
  cfg.enabled = true;
  cfg.rank = 2;
  cfg.lazy_error = true;
  ParallelLayout l;
  l.pp_size = 2, l.vp_size = 2;
  l.pp_rank = 0;  // virtual stages 0 and 2
  auto first = make_backprop_links(cfg, l, 16, 8, 1);
  ASSERT_EQ(first.send.size(), 2u);
  EXPECT_EQ(first.send[0], nullptr);  // the embedding's chunk sends nothing backward
  EXPECT_NE(first.send[1], nullptr);
  EXPECT_NE(first.recv[0], nullptr);
  EXPECT_NE(first.recv[1], nullptr);
  l.pp_rank = 1;  // virtual stages 1 and 3 (the head)
  auto last = make_backprop_links(cfg, l, 16, 8, 1);
  EXPECT_NE(last.send[0], nullptr);
  EXPECT_NE(last.send[1], nullptr);
  EXPECT_NE(last.recv[0], nullptr);
  EXPECT_EQ(last.recv[1], nullptr);
  // LEP's residual is the sender's: a receiver, which only decodes, keeps none.
  EXPECT_NE(last.send[0]->residual(), nullptr);
  EXPECT_EQ(last.recv[0]->residual(), nullptr);
  // Each link's state is saved under its own chunk's name, so resuming restores the right residual.
  test::TempDir dir;
  std::vector<float> g(16 * 8, 0.5f), wire(size_t(last.send[0]->wire_floats()));
  last.send[0]->encode(g.data(), wire.data(), {});
  last.send[1]->encode(g.data(), wire.data(), {});
  CompressionState({last.send[0].get(), last.send[1].get()}, nullptr).save(dir / "s.bin", nlohmann::json::object());
  const TensorFileReader r = TensorFileReader::open(dir / "s.bin");
  int chunk0 = 0, chunk1 = 0;
  for (const auto& name : r.names()) {
    chunk1 += name.rfind("cb/chunk1/", 0) == 0;
    chunk0 += name.rfind("cb/", 0) == 0 && name.rfind("cb/chunk1/", 0) != 0;
  }
  EXPECT_GT(chunk0, 0);
  EXPECT_EQ(chunk0, chunk1);
}

}  // namespace
}  // namespace occ
