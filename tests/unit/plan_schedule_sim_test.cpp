// The schedule simulator on pipelines computable by hand.
#include <gtest/gtest.h>

#include <algorithm>

#include "parallel/pipeline_schedule.h"
#include "plan/schedule_sim.h"

using namespace occ::plan;

namespace {

SimInput uniform(int P, int M, double tf, double tb, double delay = 0.0) {
  SimInput in;
  in.micro_batches = M;
  in.stages.resize(size_t(P));
  for (int s = 0; s < P; ++s) {
    auto& st = in.stages[size_t(s)];
    st.forward = tf, st.backward = tb;
    if (s + 1 < P) st.send_forward = delay;
    if (s > 0) st.send_backward = st.send_backward_compressed = delay;
  }
  return in;
}

double critical_sum(const SimResult& r) {
  double sum = 0;
  for (auto& [c, v] : r.critical) sum += v;
  return sum;
}

}  // namespace

TEST(PlanScheduleSim, FreeCommunicationMakespanIsMPlusPMinusOneCycles) {
  const double tf = 1.0, tb = 2.0;
  for (int P : {1, 2, 3, 4, 8})
    for (int M : {1, 2, 3, 8, 16}) {
      const SimResult r = simulate(uniform(P, M, tf, tb));
      EXPECT_DOUBLE_EQ(r.iteration, (M + P - 1) * (tf + tb)) << "P=" << P << " M=" << M;
      EXPECT_NEAR(critical_sum(r), r.iteration, 1e-9);
      EXPECT_DOUBLE_EQ(r.critical.at(Category::Compute), r.iteration);
    }
}

TEST(PlanScheduleSim, LinkDelayAddsTwoDelaysPerStageBoundaryForOneMicroBatch) {
  // One micro-batch crosses every boundary forward and back: P(tf + tb) + 2(P - 1) d.
  const double tf = 1.0, tb = 2.0, d = 0.25;
  for (int P : {2, 4, 8}) {
    const SimResult r = simulate(uniform(P, 1, tf, tb, d));
    EXPECT_DOUBLE_EQ(r.iteration, P * (tf + tb) + 2 * (P - 1) * d) << "P=" << P;
    EXPECT_NEAR(r.critical.at(Category::PipelineComm), 2 * (P - 1) * d, 1e-12);
  }
}

TEST(PlanScheduleSim, LinkDelayOnTwoStagesTwoMicroBatches) {
  // By hand: s0 F0 [0,1] F1 [1,2]; s1 F0 [1+d, 2+d] B0 [.., 4+d]; s0 B0 [4+2d, 6+2d];
  // s1 F1 [4+d, 5+d] (F1 arrived at 2+d) B1 [.., 7+d]; s0 B1 [7+2d, 9+2d] = 3(tf+tb) + 2d.
  const double d = 0.25;
  EXPECT_DOUBLE_EQ(simulate(uniform(2, 2, 1.0, 2.0, d)).iteration, 9.0 + 2 * d);
}

TEST(PlanScheduleSim, DataParallelAllReduceInsideCooldownDoesNotLengthenIteration) {
  // Free communication: stage s's last backward ends s * tb before stage 0's,
  // so an all-reduce of up to s * tb starting there is hidden.
  const int P = 4, M = 8;
  const double tf = 1.0, tb = 2.0, makespan = (M + P - 1) * (tf + tb);
  SimInput in = uniform(P, M, tf, tb);
  in.stages[3].buckets = {{1.0, 3 * tb}};
  in.stages[2].buckets = {{1.0, 1.5 * tb}};
  in.stages[1].buckets = {{0.5, 0.5 * tb}, {1.0, 0.5 * tb}};
  EXPECT_DOUBLE_EQ(simulate(in).iteration, makespan);
  // Longer than the cool-down left to it: the excess shows.
  in.stages[3].buckets = {{1.0, 3 * tb + 0.5}};
  const SimResult r = simulate(in);
  EXPECT_DOUBLE_EQ(r.iteration, makespan + 0.5);
  EXPECT_NEAR(r.critical.at(Category::DataParallel), 3 * tb + 0.5, 1e-12);
  // On stage 0 (finishes last) every second counts; a bucket ready halfway
  // through the last backward overlaps its second half.
  in = uniform(P, M, tf, tb);
  in.stages[0].buckets = {{0.5, 3.0}};
  EXPECT_DOUBLE_EQ(simulate(in).iteration, makespan + 3.0 - 0.5 * tb);
  // Buckets are serial on the reducer thread.
  in.stages[0].buckets = {{1.0, 1.0}, {1.0, 2.0}};
  EXPECT_DOUBLE_EQ(simulate(in).iteration, makespan + 3.0);
}

TEST(PlanScheduleSim, EmbeddingSyncWaitsForFirstAndLastStage) {
  const int P = 3, M = 4;
  SimInput in = uniform(P, M, 1.0, 2.0);
  in.embedding_sync_on = true;
  in.embedding_sync = 0.75;
  in.grad_norm_sync = 0.125;
  for (auto& st : in.stages) st.optimizer = 0.5;
  const SimResult r = simulate(in);
  EXPECT_DOUBLE_EQ(r.iteration, (M + P - 1) * 3.0 + 0.75 + 0.125 + 0.5);
  EXPECT_DOUBLE_EQ(r.critical.at(Category::Embedding), 0.75);
  EXPECT_DOUBLE_EQ(r.critical.at(Category::Optimizer), 0.5);
}

TEST(PlanScheduleSim, EpilogueOnlyCompressesTheLastPMinusSSendsOfStageS) {
  const int P = 4, M = 8;
  SimInput in = uniform(P, M, 1.0, 2.0);
  for (auto& st : in.stages) st.compress = 0.01, st.decompress = 0.02;
  in.cb.enabled = true;
  in.cb.epilogue_only = true;
  const SimResult r = simulate(in);
  int compressed = 0, decompressed = 0;
  for (const auto& n : r.nodes) {
    compressed += n.category == Category::Compress;
    decompressed += n.category == Category::Decompress;
  }
  EXPECT_EQ(compressed, (P - 1) + (P - 2) + (P - 3));  // stage s: P - s sends, s >= 1
  EXPECT_EQ(decompressed, compressed);
  in.cb.epilogue_only = false;
  int all = 0;
  for (const auto& n : simulate(in).nodes) all += n.category == Category::Compress;
  EXPECT_EQ(all, (P - 1) * M);
}

TEST(PlanScheduleSim, CompressedBackwardSendShortensTheCriticalPath) {
  // One micro-batch: the backward crosses P - 1 links; compressing them
  // replaces d by the compressed transfer plus encode and decode.
  const int P = 4;
  SimInput in = uniform(P, 1, 1.0, 2.0, 1.0);
  for (auto& st : in.stages) st.send_backward_compressed = 0.1, st.compress = 0.05, st.decompress = 0.05;
  in.cb.enabled = true;
  EXPECT_DOUBLE_EQ(simulate(in).iteration, P * 3.0 + (P - 1) * 1.0 + (P - 1) * (0.1 + 0.05 + 0.05));
}

TEST(PlanScheduleSim, BlockingSendsPutEveryTransferOnTheSenderThread) {
  // Megatron-style blocking sends, P = 2, M = 1: the same chain as nonblocking
  // (the sender has nothing else to do) ...
  EXPECT_DOUBLE_EQ(simulate([] { auto in = uniform(2, 1, 1.0, 2.0, 0.5); in.blocking_sends = true; return in; }())
                       .iteration,
                   2 * 3.0 + 2 * 0.5);
  // ... but with M = 2 stage 0 waits for F0's transfer before F1: s0 F0 [0,1],
  // send [1,1.5], F1 [1.5,2.5], send [2.5,3]; s1 F0 [1.5,2.5] B0 [2.5,4.5] send
  // [4.5,5]; F1 [5,6] B1 [6,8] send [8,8.5]; s0 B0 [5,7], B1 [8.5,10.5].
  SimInput in = uniform(2, 2, 1.0, 2.0, 0.5);
  in.blocking_sends = true;
  EXPECT_DOUBLE_EQ(simulate(in).iteration, 10.5);
}

TEST(PlanScheduleSim, InterleavingShrinksTheBubbleByTheChunkCount) {
  // Free communication: plain 1F1B takes (M + P - 1) cycles of tf + tb; with V
  // chunks per stage (each tf / V, tb / V) the bubble is (P - 1) / V cycles.
  const double tf = 1.0, tb = 2.0;
  for (int P : {2, 4})
    for (int V : {2, 4})
      for (int M : {P, 2 * P, 4 * P}) {
        SimInput in = uniform(P, M, tf, tb);
        in.chunks = V;
        const SimResult r = simulate(in);
        EXPECT_NEAR(r.iteration, (M + double(P - 1) / V) * (tf + tb), 1e-9) << "P=" << P << " V=" << V << " M=" << M;
        EXPECT_NEAR(critical_sum(r), r.iteration, 1e-9);
      }
}

TEST(PlanScheduleSim, InterleavedMessagesWrapAroundAndEcFollowsTheGeneralRule) {
  const int P = 4, V = 2, M = 8;
  SimInput in = uniform(P, M, 1.0, 2.0, 0.1);
  in.chunks = V;
  for (auto& st : in.stages) {
    st.send_forward = st.send_backward = st.send_backward_compressed = 0.1;  // the ring's wrap-around links too
    st.compress = 0.01, st.decompress = 0.02;
  }
  in.cb.enabled = true;
  const SimResult all = simulate(in);
  int sends = 0, compressed = 0;
  for (const auto& n : all.nodes) {
    sends += n.category == Category::PipelineComm;
    compressed += n.category == Category::Compress;
  }
  EXPECT_EQ(sends, 2 * (P * V - 1) * M);  // every virtual-stage boundary, both directions
  EXPECT_EQ(compressed, (P * V - 1) * M);
  in.cb.epilogue_only = true;
  int late = 0;
  for (const auto& n : simulate(in).nodes) late += n.category == Category::Compress;
  // The backwards after each rank's last forward (pipeline_schedule.h), less virtual stage 0's.
  int expected = 0;
  for (int s = 0; s < P; ++s) {
    const auto after = occ::backwards_after_last_forward(occ::pipeline_program(P, V, s, M), V, M);
    for (int c = 0; c < V; ++c)
      for (int j = 0; j < M; ++j) expected += after[size_t(c)][size_t(j)] && c * P + s > 0;
  }
  EXPECT_EQ(late, expected);
  EXPECT_GT(late, 0);
}

TEST(PlanScheduleSim, OverlappedParameterGatherHidesBehindTheForwardBeforeItsUse) {
  // One stage, one micro-batch, forward 1 s, backward 2 s; one region of the
  // previous update's parameters, read halfway through the forward.
  for (double gather : {0.3, 0.8, 2.0}) {
    SimInput blocking = uniform(1, 1, 1.0, 2.0);
    blocking.stages[0].param_allgather = gather;
    const SimResult b = simulate(blocking);
    EXPECT_DOUBLE_EQ(b.iteration, 3.0 + gather);  // after the update
    SimInput overlapped = uniform(1, 1, 1.0, 2.0);
    overlapped.stages[0].param_gather_regions = {{gather, 0, 0.5}};
    const SimResult o = simulate(overlapped);
    // The first half of the forward runs beside the gather; the second waits for it.
    EXPECT_DOUBLE_EQ(o.iteration, std::max(0.5, gather) + 0.5 + 2.0) << gather;
    // When the gather is the longer, the critical path runs through it (and not the forward's first half).
    EXPECT_NEAR(o.critical.at(Category::DataParallel), gather > 0.5 ? gather : 0.0, 1e-12);
    EXPECT_NEAR(critical_sum(o), o.iteration, 1e-9);
  }
  // Two stages, two regions each: stage 1's forward waits for its own region 1 at 0.9 of its forward;
  // only the first forward of each stage waits (micro-batch 1's does not).
  SimInput in = uniform(2, 2, 1.0, 2.0);
  for (auto& st : in.stages) st.param_gather_regions = {{0.2, 0, 0.0}, {0.2, 0, 0.9}};
  EXPECT_DOUBLE_EQ(simulate(in).iteration, simulate(uniform(2, 2, 1.0, 2.0)).iteration + 0.2);
}

TEST(PlanScheduleSim, LatencyIsInFlightNotLinkOccupancy) {
  // P2, M2: 1F1B's stage 0 runs F0 F1 before its first backward, so it sends two activations
  // back to back. Each send takes b on the link and then a latency L in flight; the link
  // carries F1 during F0's flight, so F1 arrives at tf + 2b + L (b >= tf), not tf + 2(b + L)
  // as if the latency occupied the link.
  const double tf = 0.01, tb = 0.01, b = 0.05, L = 1.0;
  SimInput in = uniform(2, 2, tf, tb, b + L);
  for (auto& st : in.stages) st.send_forward_latency = st.send_backward_latency = L;
  const SimResult r = simulate(in);
  double second_forward_start = -1;
  for (const SimNode& n : r.nodes)
    if (n.name == "s1 F1") second_forward_start = n.start;
  EXPECT_NEAR(second_forward_start, tf + 2 * b + L, 1e-9);
  EXPECT_NEAR(critical_sum(r), r.iteration, 1e-9);
  // One micro-batch: the latency counts once per boundary and direction, as before.
  SimInput one = uniform(2, 1, 1.0, 2.0, 0.25);
  for (auto& st : one.stages) st.send_forward_latency = st.send_backward_latency = 0.2;
  EXPECT_DOUBLE_EQ(simulate(one).iteration, 2 * 3.0 + 2 * 0.25);
  EXPECT_NEAR(critical_sum(simulate(one)), 2 * 3.0 + 2 * 0.25, 1e-12);
}
