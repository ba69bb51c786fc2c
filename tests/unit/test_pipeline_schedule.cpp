// The pipeline programs: plain 1F1B, Megatron's interleaved 1F1B, and EC's
// general rule (the backward sends after a rank's last forward).
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <set>
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

// Runs every rank's program with nonblocking sends and blocking receives (as
// the engine does); returns false on a deadlock.
bool runs_to_completion(int P, int V, int M) {
  std::vector<std::vector<Op>> prog;
  for (int s = 0; s < P; ++s) prog.push_back(pipeline_program(P, V, s, M));
  std::set<std::tuple<int, int, int, int>> sent;  // (kind, virtual stage, mb): output of that virtual stage
  std::vector<size_t> pc(size_t(P), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < P; ++s) {
      while (pc[size_t(s)] < prog[size_t(s)].size()) {
        const Op op = prog[size_t(s)][pc[size_t(s)]];
        const int v = op.chunk * P + s;
        if (op.kind == F && v > 0 && !sent.count({F, v - 1, op.micro_batch, 0})) break;
        if (op.kind == B && v < P * V - 1 && !sent.count({B, v + 1, op.micro_batch, 0})) break;
        sent.insert({op.kind, v, op.micro_batch, 0});
        ++pc[size_t(s)];
        progress = true;
      }
    }
  }
  for (int s = 0; s < P; ++s)
    if (pc[size_t(s)] != prog[size_t(s)].size()) return false;
  return true;
}

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
              if (o.chunk == c) EXPECT_EQ(o.micro_batch, o.kind == F ? nf++ : nb++);
          }
        }
        EXPECT_TRUE(runs_to_completion(P, V, M));
      }
  for (int P : {1, 2, 4, 7})
    for (int M : {1, 3, 8}) EXPECT_TRUE(runs_to_completion(P, 1, M)) << P << " " << M;
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
  last.send[0]->encode(g.data(), wire.data());
  last.send[1]->encode(g.data(), wire.data());
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
