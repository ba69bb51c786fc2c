// The cost model against the engine's own counts and the FLOP formula.
#include <gtest/gtest.h>

#include "comm/ring_volume.h"
#include "compress/powersgd.h"
#include "plan/model_cost.h"

using namespace occ::plan;

namespace {

// The model of python3 -m occtools bench-layouts: 4 layers, hidden 128, vocab 4096, P2 D2.
PlanConfig small(int T = 1, int P = 2, int D = 2) {
  PlanConfig c;
  c.model.num_layers = 4, c.model.hidden_size = 128, c.model.num_attention_heads = 4;
  c.model.seq_length = c.model.max_position_embeddings = 128, c.model.vocab_size = 4096;
  c.micro_batch_size = 4, c.global_batch_size = 32;
  c.tp = T, c.pp = P, c.dp = D;
  c.cluster.nodes = P * D, c.cluster.devices_per_node = T;
  return c;
}

}  // namespace

TEST(PlanModelCost, IterationFlopsMatchMegatronFormula) {
  const PlanConfig c = small();
  const double L = 4, C = 128, V = 4096, B = 32, S = 128;
  EXPECT_DOUBLE_EQ(iteration_flops(c), 72 * L * C * C * B * S + 6 * V * C * B * S + 12 * L * B * S * S * C);
}

TEST(PlanModelCost, LlamaCountsSwiglusThreeMatricesAndGroupedKeyValues) {
  // RMSNorm, SwiGLU (Megatron's default width int(8 x 128 / 3 / 64) x 64 = 320), RoPE,
  // 4 heads in 2 query groups (QKV rows (4 + 2 x 2) x 32 = 256), untied, no biases.
  PlanConfig c = small();
  c.model.normalization = occ::Normalization::RMSNorm, c.model.swiglu = true;
  c.model.position_embedding = occ::PositionEmbedding::Rope;
  c.model.group_query_attention = true, c.model.num_query_groups = 2;
  c.model.untie_embeddings_and_output_weights = true, c.model.add_bias_linear = false;
  const double L = 4, C = 128, V = 4096, B = 32, S = 128, F = 320, QKV = 256;
  ASSERT_EQ(c.model.ffn_hidden_size(), 320);
  const double matrices = C * QKV + C * C + 3 * C * F;  // per layer
  EXPECT_DOUBLE_EQ(iteration_flops(c), 6 * L * matrices * B * S + 6 * V * C * B * S + 12 * L * B * S * S * C);
  // The stages' parameters (and so their DP bytes and model-state memory) are the
  // model's: no position table, RMSNorm weights only, the output layer on the last stage.
  const CostModel m = build_cost_model(c);
  const double norms = C;
  EXPECT_DOUBLE_EQ(double(m.facts[0].params), V * C + 2 * (2 * norms + matrices));
  EXPECT_DOUBLE_EQ(double(m.facts[1].params), 2 * (2 * norms + matrices) + norms + V * C);
  EXPECT_EQ(m.facts[0].params + m.facts[1].params, c.model.num_parameters());
}

TEST(PlanModelCost, DataParallelBytesEqualTheEngineCounters) {
  // Measured per rank in a T1 P2 D2 run of this model (train --metrics):
  // stage 0 sends 3,748,864 DP bytes, stage 1 3,684,352; emb all-reduce 2,097,152.
  const CostModel m = build_cost_model(small());
  EXPECT_DOUBLE_EQ(m.facts[0].dp_bytes, 3748864);
  EXPECT_DOUBLE_EQ(m.facts[1].dp_bytes, 3684352);
  EXPECT_DOUBLE_EQ(m.embedding_bytes, 4096.0 * 128 * 4);
  EXPECT_DOUBLE_EQ(m.pp_message_bytes, 4.0 * 128 * 128 * 4);
}

TEST(PlanModelCost, FusedEmbeddingTakesTheWordEmbeddingOutOfTheBuckets) {
  PlanConfig c = small();
  c.emb_comm_opt = true;
  const CostModel m = build_cost_model(c);
  EXPECT_DOUBLE_EQ(m.facts[0].dp_bytes, 3748864 - 4096.0 * 128 * 4);
  EXPECT_DOUBLE_EQ(m.facts[1].dp_bytes, 3684352 - 4096.0 * 128 * 4);
  // One all-reduce over 2 x DP = 4 ranks instead of 2.
  const double lat = c.cluster.inter.latency, bw = c.cluster.inter.bandwidth, E = 4096.0 * 128 * 4;
  EXPECT_NEAR(m.input.embedding_sync, 6 * lat + 1.5 * E / bw, 1e-12);
  EXPECT_NEAR(build_cost_model(small()).input.embedding_sync, 2 * lat + E / bw, 1e-12);
}

TEST(PlanModelCost, CompressedMessagesAndSelectiveStages) {
  PlanConfig c = small(1, 4, 2);
  c.global_batch_size = 64;
  c.cb = {.enabled = true, .rank = 16, .lazy_error = true, .epilogue_only = true};
  c.grad_comp.enabled = true;
  c.grad_comp.rank = 8;
  c.grad_comp.selective_way = 2;
  const CostModel m = build_cost_model(c);
  EXPECT_DOUBLE_EQ(m.pp_compressed_bytes, 16.0 * (512 + 128) * 4);
  EXPECT_GT(m.facts[0].compressed_params, 0);
  EXPECT_GT(m.facts[1].compressed_params, 0);
  EXPECT_EQ(m.facts[2].compressed_params, 0);
  EXPECT_EQ(m.facts[3].compressed_params, 0);
  EXPECT_FALSE(m.input.stages[1].dp_compression.empty());
  EXPECT_TRUE(m.input.stages[2].dp_compression.empty());
  EXPECT_LT(m.facts[1].dp_bytes, m.facts[1].dp_dense_bytes);
  EXPECT_DOUBLE_EQ(m.facts[2].dp_bytes, m.facts[2].dp_dense_bytes);
}

TEST(PlanModelCost, TensorParallelRanksShareTheNodeLink) {
  // T8 on 8-device nodes: the 8 DP all-reduces of a stage share one NIC, so a
  // bucket of b bytes per rank takes as long as 8b through the link.
  PlanConfig c = small(8, 2, 2);
  c.model.num_attention_heads = 8;
  c.cluster.devices_per_node = 8;
  const CostModel m = build_cost_model(c);
  const auto& b = m.input.stages[1].buckets.front();
  const LinkSpec l = c.cluster.inter;
  EXPECT_NEAR(b.seconds, 2 * l.latency + b.bytes * 8 / l.bandwidth, 1e-12);
  // Pipeline sends: each TP rank sends 1/8 of the activation, 8 at once.
  EXPECT_NEAR(m.input.stages[0].send_forward, l.latency + 4.0 * 128 * 128 * 4 / l.bandwidth, 1e-12);
}

TEST(PlanModelCost, MainThreadMessagesUseTheirOwnLatency) {
  // p2p_latency applies to pipeline sends and scalar all-reduces; the DP
  // buckets keep the per-ring-step latency.
  PlanConfig c = small(1, 2, 2);
  c.cluster.devices_per_node = 1, c.cluster.nodes = 4;
  c.cluster.inter = {1e9, 5e-3};
  c.cluster.inter.p2p_latency = 1e-4;
  const CostModel m = build_cost_model(c);
  const auto& b = m.input.stages[0].buckets.front();
  EXPECT_NEAR(b.seconds, 2 * 5e-3 + b.bytes / 1e9, 1e-12);
  EXPECT_NEAR(m.input.stages[0].send_forward, 1e-4 + m.pp_message_bytes / 1e9, 1e-12);
  // Of it, the latency is in flight (the link carries the next message meanwhile).
  EXPECT_EQ(m.input.stages[0].send_forward_latency, 1e-4);
  EXPECT_EQ(m.input.stages[1].send_backward_latency, 1e-4);
  EXPECT_NEAR(m.input.grad_norm_sync, 2 * 1e-4 + 8.0 / 1e9, 1e-12);
  EXPECT_NEAR(m.input.loss_sync, 6 * 1e-4 + 2.0 * 3 / 4 * 8 / 1e9, 1e-12);
  // Unset: one latency for everything.
  c.cluster.inter.p2p_latency = -1;
  EXPECT_NEAR(build_cost_model(c).input.stages[0].send_forward, 5e-3 + m.pp_message_bytes / 1e9, 1e-12);
}

TEST(PlanModelCost, ComputeTimesFollowFlopsAndRate) {
  PlanConfig c = small(1, 1, 1);
  c.cluster.device_flops = 1e9, c.cluster.efficiency = 1.0, c.cluster.free_comm = true;
  const CostModel m = build_cost_model(c);
  const double N = 512, C = 128, V = 4096;
  const double fwd = 4 * (24 * N * C * C + 4 * N * 128 * C) + 2 * N * C * V;
  EXPECT_NEAR(m.input.stages[0].forward, fwd / 1e9, 1e-12);
  EXPECT_NEAR(m.input.stages[0].backward, 2 * fwd / 1e9, 1e-12);
  c.recompute_activations = true;
  EXPECT_NEAR(build_cost_model(c).input.stages[0].backward, 3 * fwd / 1e9, 1e-12);
}

TEST(PlanModelCost, ValidationNamesTheFlag) {
  PlanConfig c = small();
  c.model.num_layers = 5;
  try {
    c.validate();
    FAIL() << "expected a usage error";
  } catch (const occ::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--pipeline-model-parallel-size"), std::string::npos);
  }
}

// The other methods (compress/compressor_factory.h): the planner's bytes are the
// engine's wire formulas (tests/cli/compression_counts.sh checks the engine's).
TEST(PlanModelCost, ByteMethodsOnEveryLinkClass) {
  PlanConfig c = small();  // P2 D2; one message: 512 tokens x 128 hidden
  c.cb.enabled = true;
  c.cb.method = occ::CompressionMethod::Int8;
  c.activation_comp = {.enabled = true, .method = occ::CompressionMethod::Topk, .topk_fraction = 0.25};
  const CostModel m = build_cost_model(c);
  EXPECT_DOUBLE_EQ(m.pp_compressed_bytes, 4.0 * 512 + 512.0 * 128);            // int8: scales + codes
  EXPECT_DOUBLE_EQ(m.pp_forward_bytes, 4.0 * 512 * 32 + 512.0 * (128 / 8));    // topk k=32: values + bitmaps
  EXPECT_DOUBLE_EQ(m.pp_message_bytes, 4.0 * 512 * 128);
  EXPECT_GT(m.input.stages[0].send_forward, 0);
  EXPECT_LT(m.input.stages[0].send_forward, build_cost_model(small()).input.stages[0].send_forward);

  // DP int8, all-gathered: (D - 1) x the message, plus the uncompressed (1-D) buckets.
  PlanConfig d = small();
  d.grad_comp.enabled = true;
  d.grad_comp.method = occ::CompressionMethod::Int8;
  const CostModel md = build_cost_model(d);
  for (int s = 0; s < 2; ++s) {
    EXPECT_GT(md.facts[size_t(s)].compressed_params, 0);
    const double words_bytes = double(md.facts[size_t(s)].compressed_params);  // ~1 byte per entry + row scales
    EXPECT_GT(md.facts[size_t(s)].dp_bytes, words_bytes);
    EXPECT_LT(md.facts[size_t(s)].dp_bytes, md.facts[size_t(s)].dp_dense_bytes / 3);
    ASSERT_EQ(md.input.stages[size_t(s)].dp_compression.size(), 3u);
    EXPECT_EQ(md.input.stages[size_t(s)].dp_compression[1].name, "dp all-gather");
  }
}

TEST(PlanModelCost, InterleavedChunksAndDistributedOptimizer) {
  PlanConfig c = small(1, 2, 2);
  c.model.num_layers = 8;
  const CostModel plain = build_cost_model(c);
  c.layers_per_virtual_stage = 2;  // 2 chunks of 2 layers per stage
  const CostModel inter = build_cost_model(c);
  EXPECT_EQ(inter.input.chunks, 2);
  for (int s = 0; s < 2; ++s) {
    const auto& st = inter.input.stages[size_t(s)];
    ASSERT_EQ(st.chunk_forwards.size(), 2u);
    // The chunks add up to the stage; the head sits in the last stage's last chunk.
    EXPECT_NEAR(st.chunk_forwards[0] + st.chunk_forwards[1], plain.input.stages[size_t(s)].forward, 1e-12);
    EXPECT_GT(st.send_forward, 0);  // the last stage feeds the first one's next chunk
    EXPECT_GT(st.send_backward, 0);
    EXPECT_EQ(inter.facts[size_t(s)].params, plain.facts[size_t(s)].params);
  }
  EXPECT_GT(inter.input.stages[1].chunk_forwards[1], inter.input.stages[1].chunk_forwards[0]);
  EXPECT_GT(inter.facts[0].in_flight, plain.facts[0].in_flight);
  // Compute-bound (free communication) the smaller bubble wins; on this tiny
  // model's network the V-fold pipeline messages can cost more than it saves.
  PlanConfig free = c, free_plain = c;
  free.cluster.free_comm = free_plain.cluster.free_comm = true;
  free_plain.layers_per_virtual_stage = 0;
  EXPECT_LT(simulate(build_cost_model(free).input).iteration, simulate(build_cost_model(free_plain).input).iteration);

  c.use_distributed_optimizer = true;
  const CostModel zero = build_cost_model(c);
  for (int s = 0; s < 2; ++s) {
    const double p = double(inter.facts[size_t(s)].params);
    EXPECT_NEAR(inter.facts[size_t(s)].model_state_bytes, 16 * p, 1e-6);
    EXPECT_NEAR(zero.facts[size_t(s)].model_state_bytes, 8 * p + 8 * p / 2, 1e-6);  // Adam over D = 2
    EXPECT_GT(zero.input.stages[size_t(s)].param_allgather, 0);
    EXPECT_NEAR(zero.input.stages[size_t(s)].optimizer, inter.input.stages[size_t(s)].optimizer / 2, 1e-15);
    // Reduce-scatter + all-gather move as many bytes as the all-reduce.
    EXPECT_NEAR(zero.facts[size_t(s)].dp_bytes, inter.facts[size_t(s)].dp_bytes, 1e-6 * p);
  }
  c.global_batch_size = 24;  // 3 micro-batches per DP rank: not a multiple of P
  EXPECT_THROW(c.validate(), occ::UsageError);
}

TEST(PlanModelCost, SequenceParallelMovesTheAllReducesBytesAsReduceScatterPlusAllGather) {
  // The engine's ring: a reduce-scatter and an all-gather of the same [N, C]
  // move exactly an all-reduce's bytes (comm/ring_volume.h).
  for (int T : {2, 4})
    for (size_t n : {size_t(4096), size_t(4 * 128 * 128)})
      EXPECT_EQ(occ::ring_reduce_scatter_bytes(n, T, 0, 4) + occ::ring_allgather_bytes(n / size_t(T), T, 4),
                occ::ring_allreduce_bytes(n, T, 0, 4));
  for (int T : {2, 4})
    for (int P : {1, 3}) {
      PlanConfig c = small(T, P, 1);
      c.model.num_layers = 6;
      c.cluster.nodes = P;
      const CostModel plain = build_cost_model(c);
      c.sequence_parallel = true;
      const CostModel sp = build_cost_model(c);
      const double NC = 4.0 * 128 * 128, ag = (T - 1.0) * NC / T * 4;  // one all-gather of [N, C] per rank
      for (int s = 0; s < P; ++s) {
        const StageFacts &a = plain.facts[size_t(s)], &b = sp.facts[size_t(s)];
        const int layers = 6 / P;
        // Per stage the embedding's all-reduce becomes a reduce-scatter (forward)
        // + all-gather (backward), the head's input gathered (forward) and its
        // gradient reduce-scattered (backward): the same bytes in all; Megatron's
        // backward gathers each column-parallel layer's input again (2 per layer).
        EXPECT_DOUBLE_EQ(b.tp_bytes_forward + b.tp_bytes_backward,
                         a.tp_bytes_forward + a.tp_bytes_backward + 2 * layers * ag)
            << "T" << T << " P" << P << " stage " << s;
        if (s > 0 && s < P - 1) EXPECT_DOUBLE_EQ(b.tp_bytes_forward, a.tp_bytes_forward);  // no embedding, no head
        // Each rank keeps its own slice between stages: no all-gather after a receive.
        EXPECT_GT(plain.input.stages[size_t(s)].gather, 0);
        EXPECT_EQ(sp.input.stages[size_t(s)].gather, 0);
        EXPECT_EQ(a.activation_bytes_per_layer > b.activation_bytes_per_layer, true);
      }
      if (P == 1) EXPECT_DOUBLE_EQ(sp.facts[0].tp_bytes_forward, plain.facts[0].tp_bytes_forward);
      // The re-gather hides behind the input-gradient GEMM where it is shorter: never below the plain backward.
      EXPECT_GE(sp.input.stages[0].backward, plain.input.stages[0].backward - 1e-15);
      EXPECT_GT(sp.input.stages[0].sp_grad_allreduce, 0);
    }
  PlanConfig bad = small(1, 2, 2);
  bad.sequence_parallel = true;
  EXPECT_THROW(bad.validate(), occ::UsageError);
}

TEST(PlanModelCost, ActivationMemoryFollowsKorthikantiEtAl) {
  // GPT-2.5B's layer at T8, 2-byte values: s·b·h·(10 + 24/t + 5·a·s/(h·t)) and s·b·h/t·(34 + 5·a·s/h).
  PlanConfig c;
  c.model.num_layers = 52, c.model.hidden_size = 1920, c.model.num_attention_heads = 24;
  c.model.seq_length = 1024, c.micro_batch_size = 8, c.tp = 8, c.bytes_per_value = 2;
  const double s = 1024, b = 8, h = 1920, a = 24, t = 8, sbh = s * b * h;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(c), sbh * (10 + 24 / t + 5 * a * s / (h * t)));
  c.sequence_parallel = true;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(c), sbh / t * (34 + 5 * a * s / h));
  c.selective_recompute = true;  // the attention term goes
  EXPECT_DOUBLE_EQ(layer_activation_bytes(c), sbh / t * 34);
  c.recompute_activations = true;  // full: the input only
  EXPECT_DOUBLE_EQ(layer_activation_bytes(c), 2 * sbh / t);
  // fp32 values, 1-byte masks: 16 values + 2 mask bytes per s·b·h, 2 values + 1 byte per a·s·s·b.
  PlanConfig f = c;
  f.selective_recompute = f.recompute_activations = f.sequence_parallel = false;
  f.bytes_per_value = 4;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(f), sbh * (18 + 48 / t) + a * s * s * b * 9 / t);
  // Held at the peak: every layer of the micro-batches in flight.
  const CostModel m = build_cost_model(small(2, 2, 1));
  EXPECT_DOUBLE_EQ(m.facts[0].activation_bytes, m.facts[0].in_flight * 2 * m.facts[0].activation_bytes_per_layer);
}

TEST(PlanModelCost, OverlappedParameterGatherByRegion) {
  PlanConfig c = small(1, 2, 2);
  c.model.num_layers = 8;
  c.dp_bucket_elems = 100000;
  c.use_distributed_optimizer = true;
  const CostModel blocking = build_cost_model(c);
  c.overlap_param_gather = true;
  const CostModel overlap = build_cost_model(c);
  for (int s = 0; s < 2; ++s) {
    const StageTimes &b = blocking.input.stages[size_t(s)], &o = overlap.input.stages[size_t(s)];
    EXPECT_GT(b.param_allgather, 0);
    EXPECT_TRUE(b.param_gather_regions.empty());
    EXPECT_EQ(o.param_allgather, 0);
    ASSERT_GT(o.param_gather_regions.size(), 2u);
    // In buffer order, which is the order forward first reads them.
    for (size_t r = 1; r < o.param_gather_regions.size(); ++r)
      EXPECT_GE(o.param_gather_regions[r].needed_at, o.param_gather_regions[r - 1].needed_at);
    EXPECT_LT(o.param_gather_regions.back().needed_at, 1.0);
    EXPECT_DOUBLE_EQ(blocking.facts[size_t(s)].dp_bytes, overlap.facts[size_t(s)].dp_bytes);
  }
  EXPECT_EQ(overlap.input.stages[0].param_gather_regions.front().needed_at, 0.0);  // the embedding, first
  // Hidden behind the next forward: never slower than blocking.
  EXPECT_LT(simulate(overlap.input).iteration, simulate(blocking.input).iteration);
  PlanConfig bad = small(1, 2, 2);
  bad.overlap_param_gather = true;
  EXPECT_THROW(bad.validate(), occ::UsageError);
}
