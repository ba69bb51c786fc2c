#include "plan/model_cost.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "comm/ring_volume.h"
#include "compress/powersgd.h"
#include "core/error.h"
#include "model/params.h"
#include "model/tensor_descs.h"
#include "parallel/grad_sync.h"
#include "parallel/pipeline_schedule.h"
#include "train/options.h"

namespace occ::plan {

TrainOptions PlanConfig::job_options() const {
  TrainOptions o;
  o.model = model;
  o.tensor_parallel = tp, o.pipeline_parallel = pp, o.layers_per_virtual_stage = layers_per_virtual_stage;
  o.micro_batch_size = micro_batch_size, o.global_batch_size = global_batch_size;
  o.use_distributed_optimizer = use_distributed_optimizer, o.overlap_param_gather = overlap_param_gather;
  o.sequence_parallel = sequence_parallel;
  o.cb = cb, o.grad_comp = grad_comp, o.activation_comp = activation_comp, o.emb_comm_opt = emb_comm_opt;
  // (The plan's DP error feedback is resolved from --use-error-feedback too: as a flag it needs --grad-comp.)
  o.grad_comp.error_feedback = grad_comp.enabled && grad_comp.error_feedback;
  o.diloco = diloco;
  o.dp_bucket_elems = dp_bucket_elems;
  o.recompute_granularity = recompute_activations ? "full" : selective_recompute ? "selective" : "";
  return o;
}

void PlanConfig::validate() const {
  auto usage = [](bool ok, const std::string& msg) {
    if (!ok) throw UsageError(msg);
  };
  usage(tp >= 1 && pp >= 1 && dp >= 1, "layout sizes must be >= 1; check --tensor-model-parallel-size and "
                                       "--pipeline-model-parallel-size");
  // The job's flags: the same function (and messages) as train.
  const TrainOptions job = job_options();
  ParallelLayout layout;
  layout.tp_size = tp, layout.pp_size = pp, layout.dp_size = dp, layout.vp_size = job.model_chunks();
  try {
    job.validate(layout);
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  usage(bytes_per_value == 2 || bytes_per_value == 4, "--bytes-per-value must be 2 (fp16) or 4 (fp32)");
  usage(grad_bytes_per_value == 0 || grad_bytes_per_value == 2 || grad_bytes_per_value == 4,
        "--grad-bytes-per-value must be 2 or 4 (or 0: --bytes-per-value)");
  usage(tp_sum_bytes_per_value == 0 || tp_sum_bytes_per_value == 2 || tp_sum_bytes_per_value == 4,
        "internal: TP sums of 2 or 4 bytes per value");
  usage(factor_bytes_per_value == 0 || factor_bytes_per_value == 2 || factor_bytes_per_value == 4,
        "internal: PowerSGD factors of 2 or 4 bytes per value");
  validate_cluster(cluster);
}

void validate_cluster(const ClusterSpec& c) {
  auto usage = [](bool ok, const std::string& msg) {
    if (!ok) throw UsageError(msg);
  };
  usage(c.nodes >= 1, fmt::format("--nodes must be >= 1 (got {})", c.nodes));
  usage(c.devices_per_node >= 1, fmt::format("--devices-per-node must be >= 1 (got {})", c.devices_per_node));
  // (Values shown in the flags' units: TFLOP/s, GB/s, microseconds.)
  auto positive = [&](double v, double unit, const char* flag) {
    usage(std::isfinite(v) && v > 0, fmt::format("{} must be a finite number > 0 (got {:g})", flag, v / unit));
  };
  positive(c.device_flops, 1e12, "--device-tflops");
  usage(c.efficiency > 0 && c.efficiency <= 1, fmt::format("--efficiency must be in (0, 1] (got {})", c.efficiency));
  positive(c.memory_bandwidth, 1e9, "--memory-bandwidth");
  positive(c.compress_efficiency, 1, "--compress-efficiency");
  positive(c.intra.bandwidth, 1e9, "--intra-node-bandwidth");
  positive(c.inter.bandwidth, 1e9, "--inter-node-bandwidth");
  auto latency = [&](double v, const char* flag) {
    usage(std::isfinite(v) && v >= 0, fmt::format("{} must be a finite number >= 0 (got {:g})", flag, v * 1e6));
  };
  latency(c.intra.latency, "--intra-node-latency");
  latency(c.inter.latency, "--inter-node-latency");
  usage(!std::isnan(c.intra.p2p_latency) && !std::isnan(c.inter.p2p_latency), "internal: a NaN point-to-point latency");
}

namespace {

struct Placement {
  const PlanConfig& cfg;
  int rank(int pp, int dp, int tp) const { return rank_of(cfg, pp, dp, tp); }
  int node(int r) const { return cfg.cluster.node_of(r); }
  int sharing(int r, int stage) const { return node_sharing(cfg, r, stage); }
  bool same_node(const std::vector<int>& ranks) const {
    for (int r : ranks)
      if (node(r) != node(ranks.front())) return false;
    return true;
  }
  LinkSpec link(const std::vector<int>& ranks) const {
    return same_node(ranks) ? cfg.cluster.intra : cfg.cluster.inter;
  }
  int link_sharing(const std::vector<int>& ranks, int stage) const {
    return same_node(ranks) ? 1 : sharing(ranks.front(), stage);
  }
};

// Two FLOPs per weight of the layer's matrices for every token (GPT-2: 12 h^2; SwiGLU's
// three MLP matrices and GQA's narrower k/v projections as GptConfig counts them), plus
// attention's scores and weighted sum over the sequence (every query head: 4 s h).
double layer_forward_flops(const PlanConfig& c) {
  const double N = double(c.tokens()), C = c.model.hidden_size, s = c.model.seq_length;
  return 2.0 * N * double(c.model.layer_matrix_params()) + 4.0 * N * s * C;
}

}  // namespace

int node_sharing(const PlanConfig& cfg, int rank, int stage) {
  const int n = cfg.cluster.node_of(rank), per = cfg.cluster.devices_per_node, block = cfg.dp * cfg.tp;
  int count = 0;
  for (int q = n * per; q < (n + 1) * per; ++q) count += q / block == stage ? 1 : 0;
  return std::max(count, 1);
}

double layer_activation_bytes(const PlanConfig& c) {
  const double s = c.model.seq_length, b = c.micro_batch_size, h = c.model.hidden_size, a = c.model.num_attention_heads;
  const double t = c.tp, v = c.bytes_per_value, sbh = s * b * h;
  const double split = c.sequence_parallel ? t : 1.0;
  if (c.recompute_activations) return sbh * v / split;  // the layer's input
  // Values (v bytes) per s·b·h: LayerNorm inputs 2, QKV input 1, Q K V 3,
  // out-projection input 1, MLP input 1, GeLU input 4, MLP-down input 4; masks
  // (1 byte): 2 dropouts; per a·s·s·b: softmax output and dropout output
  // (values), dropout mask. Inside the TP region (Q K V, out-projection input,
  // GeLU and MLP-down inputs, attention) / t; the rest / t with SP.
  const double attention = c.selective_recompute ? 0.0 : a * s * s * b * (2 * v + 1) / t;
  const double outside = sbh * (4 * v + 2), inside = sbh * 12 * v / t;
  return outside / split + inside + attention;
}

double mean_iteration_seconds(const CostModel& model, double simulated_iteration) {
  return simulated_iteration + model.diloco.amortized(simulated_iteration);
}

double iteration_flops(const PlanConfig& c) {
  const double N = double(c.tokens()), C = c.model.hidden_size, V = c.model.padded_vocab_size();
  const double fwd = c.model.num_layers * layer_forward_flops(c) + 2.0 * N * C * V;
  return fwd * (c.recompute_activations ? 4.0 : 3.0) * c.micro_batches() * c.dp;
}

CostModel build_cost_model(const PlanConfig& cfg0, const Measured* measured) {
  PlanConfig cfg = cfg0;
  if (cfg.cluster.free_comm) {
    const LinkSpec free{std::numeric_limits<double>::infinity(), 0.0};
    cfg.cluster.intra = cfg.cluster.inter = free;
  }
  const Placement place{cfg};
  const int T = cfg.tp, P = cfg.pp, D = cfg.dp, bpv = cfg.bytes_per_value, gbv = cfg.grad_bytes();
  const int sbv = cfg.tp_sum_bytes();  // TP sums
  const double pp_factor_bytes = cfg.factor_bytes_per_value > 0 ? cfg.factor_bytes_per_value : bpv;
  const double dp_factor_bytes = cfg.factor_bytes_per_value > 0 ? cfg.factor_bytes_per_value : gbv;
  const bool sp = cfg.sequence_parallel && T > 1;
  const double N = double(cfg.tokens()), C = cfg.model.hidden_size, V = cfg.model.padded_vocab_size();
  const int Ls = cfg.model.num_layers / P;
  const bool use_stage_measures = measured && int(measured->stages.size()) == P;
  const double rate = measured && measured->achieved_flops > 0 ? measured->achieved_flops : cfg.cluster.achieved_flops();
  const double ce = measured && measured->compress_efficiency > 0 ? measured->compress_efficiency
                                                                  : cfg.cluster.compress_efficiency;
  // A memory-bound or compute-bound kernel, whichever is slower.
  auto kernel = [&](double flops, double bytes) {
    return std::max(flops / (rate * ce), bytes / cfg.cluster.memory_bandwidth);
  };

  CostModel out;
  out.compute_source = use_stage_measures ? "calibrated per-stage times"
                       : measured         ? fmt::format("calibrated {:.3g} FLOP/s", rate)
                                          : fmt::format("{:.3g} FLOP/s peak x {:.2f}", cfg.cluster.device_flops,
                                                        cfg.cluster.efficiency);
  SimInput& in = out.input;
  in.micro_batches = cfg.micro_batches();
  const int chunks = cfg.chunks();
  in.chunks = chunks;
  in.cb = cfg.cb;
  in.blocking_sends = cfg.blocking_sends;
  // Point-to-point messages (Megatron scatter-gather: each TP rank sends 1/T).
  const int64_t rows = cfg.tokens() / T, cols = cfg.model.hidden_size;
  const double rc = double(rows) * double(cols);
  out.pp_message_bytes = rc * bpv;
  // PowerSGD's factors are values (factor_bytes_per_value each); the byte methods' wires are
  // 4-byte words of packed codes whatever the value width (the engine's formats).
  out.pp_compressed_bytes = double(compressed_wire_floats(cfg.cb.spec(), rows, cols)) *
                            (cfg.cb.method == CompressionMethod::PowerSgd ? pp_factor_bytes : 4.0);
  const double lep = cfg.cb.lazy_error ? 1.0 : 0.0;
  double compress_s = 0, decompress_s = 0;
  if (cfg.cb.method == CompressionMethod::PowerSgd) {
    const double kc = double(powersgd::effective_rank(rows, cols, cfg.cb.rank));
    compress_s = kernel(4 * rc * kc + 4 * double(rows) * kc * kc + lep * 2 * rc * kc, rc * bpv * (2 + 4 * lep));
    decompress_s = kernel(2 * rc * kc, rc * bpv);
  } else {
    // Byte methods are memory-bound: read the matrix twice (scale, codes), write
    // the wire; LEP adds the residual's read, the decode and the residual's write.
    compress_s = kernel(4 * rc, rc * bpv * (2 + 3 * lep) + out.pp_compressed_bytes);
    decompress_s = kernel(rc, rc * bpv + out.pp_compressed_bytes);
  }
  // Forward activations (--activation-comp-method): every message is compressed;
  // encode and decode run on the main thread, so they lengthen the forward.
  double act_encode = 0, act_decode = 0;
  out.pp_forward_bytes = out.pp_message_bytes;
  if (cfg.activation_comp.enabled) {
    out.pp_forward_bytes = 4.0 * double(compressed_wire_floats(cfg.activation_comp.spec(), rows, cols));
    act_encode = kernel(4 * rc, 2 * rc * bpv + out.pp_forward_bytes);
    act_decode = kernel(rc, rc * bpv + out.pp_forward_bytes);
  }

  for (int s = 0; s < P; ++s) {
    StageTimes st;
    StageFacts f;
    const bool first = s == 0, last = s == P - 1;
    // Compute and the TP collectives inside it.
    f.forward_flops = (Ls * layer_forward_flops(cfg) + (last ? 2.0 * N * C * V : 0.0)) / T;
    f.backward_flops = 2.0 * f.forward_flops + (cfg.recompute_activations ? f.forward_flops : 0.0);
    std::vector<int> tp_group;
    for (int t = 0; t < T; ++t) tp_group.push_back(place.rank(s, 0, t));
    const LinkSpec tp_link = place.link(tp_group);
    // An [N, C] all-reduce; with SP a reduce-scatter or all-gather of it (half
    // the ring each), and the backward's all-gather of a column-parallel
    // layer's input again, exposed only where longer than that layer's
    // input-gradient GEMM (Megatron overlaps the two).
    const double big = ring_allreduce_seconds(N * C * sbv, T, tp_link), small = ring_allreduce_seconds(N * 4, T, tp_link);
    const double half = ring_allgather_seconds(N * C * bpv, T, tp_link);
    const double regather = sp ? std::max(0.0, half - 2 * N * C * 3 * C / T / rate) +
                                     std::max(0.0, half - 2 * N * C * 4 * C / T / rate)
                               : 0.0;
    // Per chunk of `layers` layers holding the embedding and / or the head.
    auto tp_forward = [&](int layers, bool emb, bool head) {
      return 2 * layers * big + (emb ? (sp ? half : big) : 0.0) + (head ? (sp ? half : 0.0) + 3 * small : 0.0);
    };
    auto tp_backward = [&](int layers, bool emb, bool head) {
      return 2 * layers * big + layers * regather + (emb && sp ? half : 0.0) + (head ? (sp ? half : big) : 0.0) +
             (cfg.recompute_activations ? tp_forward(layers, emb, head) : 0.0);
    };
    const double tp_f = tp_forward(Ls, first, last), tp_b = tp_backward(Ls, first, last);
    {
      // The same as the ring's bytes per rank (comm/ring_volume.h), rank 0 of the group.
      const size_t nc = size_t(N * C);
      const double ar = double(ring_allreduce_bytes(nc, T, 0, size_t(sbv)));
      const double rs = double(ring_reduce_scatter_bytes(nc, T, 0, size_t(sbv)));
      const double ag = double(ring_allgather_bytes(nc / size_t(T), T, size_t(bpv)));
      const double ce = 3.0 * double(ring_allreduce_bytes(size_t(N), T, 0, 4));
      const double layer = sp ? 2 * (rs + ag) : 2 * ar;
      f.tp_bytes_forward = Ls * layer + (first ? (sp ? rs : ar) : 0.0) + (last ? (sp ? ag : 0.0) + ce : 0.0);
      f.tp_bytes_backward = Ls * layer + (sp ? 2 * Ls * ag : 0.0) + (first && sp ? ag : 0.0) +
                            (last ? (sp ? rs : ar) : 0.0) + (cfg.recompute_activations ? f.tp_bytes_forward : 0.0);
    }
    if (use_stage_measures) {
      const StageMeasure& m = measured->stages[size_t(s)];
      st.forward = m.forward + (T > 1 ? m.tp_forward : 0.0);
      st.backward = m.backward + (T > 1 ? m.tp_backward : 0.0);
      f.tp_seconds_forward = T > 1 ? m.tp_forward : 0.0, f.tp_seconds_backward = T > 1 ? m.tp_backward : 0.0;
    } else {
      f.tp_seconds_forward = tp_f, f.tp_seconds_backward = tp_b;
      st.forward = f.forward_flops / rate + tp_f;
      st.backward = f.backward_flops / rate + tp_b;
    }
    // Interleaved: each chunk has Ls / V layers; the embedding sits in the first
    // stage's chunk 0 and the head in the last stage's last chunk (measured
    // times are split evenly: the calibration run times whole stages).
    const bool wraps = chunks > 1;
    if (wraps && !use_stage_measures) {
      for (int c = 0; c < chunks; ++c) {
        const bool emb = first && c == 0, head = last && c == chunks - 1;
        const double flops = (Ls / chunks * layer_forward_flops(cfg) + (head ? 2.0 * N * C * V : 0.0)) / T;
        const double back = 2.0 * flops + (cfg.recompute_activations ? flops : 0.0);
        const double tf = tp_forward(Ls / chunks, emb, head), tb = tp_backward(Ls / chunks, emb, head);
        st.chunk_forwards.push_back(flops / rate + tf);
        st.chunk_backwards.push_back(back / rate + tb);
      }
    }
    // Pipeline links (a ring when interleaved: the last stage feeds the first one's next chunk).
    const double act_forward = (wraps || !last ? act_encode : 0.0) + (wraps || !first ? act_decode : 0.0);
    st.forward += act_forward;
    for (double& t : st.chunk_forwards) t += act_forward / chunks;
    if (wraps || !last) {
      const std::vector<int> ends{place.rank(s, 0, 0), place.rank((s + 1) % P, 0, 0)};
      st.send_forward = transfer_seconds(out.pp_forward_bytes, place.link(ends), place.link_sharing(ends, s));
      st.send_forward_latency = place.link(ends).message_latency();
    }
    if (wraps || !first) {
      const std::vector<int> ends{place.rank(s, 0, 0), place.rank((s + P - 1) % P, 0, 0)};
      const LinkSpec l = place.link(ends);
      const int sh = place.link_sharing(ends, s);
      st.send_backward = transfer_seconds(out.pp_message_bytes, l, sh);
      st.send_backward_compressed = transfer_seconds(out.pp_compressed_bytes, l, sh);
      st.send_backward_latency = l.message_latency();
      st.compress = compress_s;
    }
    if (wraps || !last) st.decompress = decompress_s;
    st.gather = sp ? 0.0 : ring_allgather_seconds(N * C * bpv, T, tp_link);  // SP: each rank keeps its slice

    // Data parallel: the engine's own bucketing of this stage's shard
    // (train/gradient_sync.cpp's groups: FE's word embedding out, the matrices
    // DP compression takes apart, and sharded, each word-embedding copy alone).
    ParallelLayout pl_layout;
    pl_layout.tp_size = T, pl_layout.pp_size = P, pl_layout.dp_size = D, pl_layout.pp_rank = s;
    pl_layout.vp_size = chunks;
    const ParamLayout pl(cfg.model, pl_layout);
    f.params = pl.total();
    const bool compress_stage = cfg.grad_comp.stage_compresses(s) && D > 1;
    const bool sharded = cfg.use_distributed_optimizer && D > 1;
    auto fused = [&](const ParamTensor& t) { return cfg.emb_comm_opt && t.word_embedding; };
    auto compressible = [&](const ParamTensor& t) { return compress_stage && t.shape.size() >= 2 && !fused(t); };
    auto own_bucket = [&](const ParamTensor& t) { return sharded && t.word_embedding && !fused(t); };
    std::vector<int> dp_group;
    for (int d = 0; d < D; ++d) dp_group.push_back(place.rank(s, d, 0));
    const LinkSpec dp_link = place.link(dp_group);
    const int dp_sharing = place.link_sharing(dp_group, s);
    const double ring = D > 1 ? 2.0 * (D - 1) / D : 0.0;
    // Backward finalises gradients from the end of the buffer; the matrices'
    // shares of the backward FLOPs say how far it has got (embeddings: last).
    auto work = [&](const ParamTensor& t) {
      return t.shape.size() >= 2 && !(first && (t.word_embedding || t.offset == pl.position_embedding)) ? double(t.numel)
                                                                                                        : 0.0;
    };
    double total_work = 0;
    for (const auto& t : pl.tensors()) total_work += work(t);
    std::vector<GradBucket> buckets;
    if (D > 1) {
      std::unordered_map<std::string, int> group_of;  // by name: make_buckets sees only TensorDescs
      for (const auto& t : pl.tensors())
        group_of[t.name] = fused(t) ? -1 : (compressible(t) ? 1 : 0) | (own_bucket(t) ? 2 : 0);
      buckets = make_buckets(describe(pl.tensors()), cfg.dp_bucket_elems,
                             [&](const TensorDesc& t) { return group_of.at(t.name); });
      for (const GradBucket& b : buckets) {
        const double elems = double(b.end - b.begin);
        // The distributed optimizer reduce-scatters instead of all-reducing: half the ring.
        const double share = sharded ? 0.5 : 1.0;
        f.dp_dense_bytes += share * ring * elems * gbv;
        if (cfg.diloco.enabled()) continue;  // no per-step DP averaging (below)
        if (b.compressible() && compress_stage) continue;
        double done = 0;
        for (const auto& t : pl.tensors())
          if (t.offset >= b.begin) done += work(t);
        st.buckets.push_back({total_work > 0 ? done / total_work : 1.0,
                              sharded ? ring_allgather_seconds(elems * gbv, D, dp_link, dp_sharing)
                                      : ring_allreduce_seconds(elems * gbv, D, dp_link, dp_sharing),
                              elems * gbv});
        f.dp_bytes += share * ring * elems * gbv;
      }
      f.buckets = int(st.buckets.size());
    }
    if (compress_stage && cfg.grad_comp.method != CompressionMethod::PowerSgd) {
      // Byte methods (compress/dp_gather_compression.h): encode, all-gather the
      // D messages, decode all D and sum them.
      double elems = 0, words = 0;
      for (const auto& t : pl.tensors()) {
        if (!compressible(t)) continue;
        const int64_t n = t.shape[0], m = t.numel / n;
        elems += double(t.numel), words += double(compressed_wire_floats(cfg.grad_comp.spec(), n, m));
        f.compressed_params += t.numel;
      }
      const double ef = cfg.grad_comp.error_feedback ? 3.0 : 0.0;
      st.dp_compression = {
          {"dp compress (encode)", Category::Compress, kernel(4 * elems, elems * gbv * (2 + ef) + 4 * words)},
          {"dp all-gather", Category::DataParallel, ring_allgather_seconds(4 * words * D, D, dp_link, dp_sharing)},
          {"dp decompress (decode + sum)", Category::Decompress,
           kernel(2 * elems * D, elems * gbv * (1 + 2.0 * D) + 4 * words * D)}};
      f.dp_bytes += (D - 1) * 4 * words;
    } else if (compress_stage) {
      double c1 = 0, c2 = 0, dec = 0, mem = 0, pf = 0, qf = 0;
      for (const auto& t : pl.tensors()) {
        if (!compressible(t)) continue;
        const double n = double(t.shape[0]), m = double(t.numel) / n;
        const double k = double(powersgd::effective_rank(int64_t(n), int64_t(m), cfg.grad_comp.rank));
        c1 += 2 * n * m * k, c2 += 4 * n * k * k + 2 * n * m * k, dec += 2 * n * m * k, mem += n * m * gbv;
        pf += n * k, qf += m * k;
        f.compressed_params += t.numel;
      }
      const double ef = cfg.grad_comp.error_feedback ? 2.0 : 0.0;
      st.dp_compression = {
          {"dp compress (P = M Q)", Category::Compress, kernel(c1, mem * (1 + ef))},
          {"dp all-reduce P", Category::DataParallel, ring_allreduce_seconds(pf * dp_factor_bytes, D, dp_link, dp_sharing)},
          {"dp compress (Q = M^T P)", Category::Compress, kernel(c2, mem)},
          {"dp all-reduce Q", Category::DataParallel, ring_allreduce_seconds(qf * dp_factor_bytes, D, dp_link, dp_sharing)},
          {"dp decompress", Category::Decompress, kernel(dec, mem * (2 + ef))}};
      f.dp_bytes += ring * (pf + qf) * dp_factor_bytes;
    }
    if (cfg.diloco.enabled()) {
      out.diloco.stages.push_back(
          diloco_stage_cost(cfg.diloco, pl, cfg.model.num_layers, D, dp_link, dp_sharing, kernel));
      out.diloco.on = true, out.diloco.inner_steps = cfg.diloco.inner_steps, out.diloco.overlap = cfg.diloco.overlap_steps;
      f.dp_bytes = out.diloco.bytes_per_iteration(s);
      // theta and v; with outer error feedback the residual too (4 bytes per parameter each).
      f.outer_state_bytes = (cfg.diloco.outer_error_feedback ? 12.0 : 8.0) * double(f.params);
    }
    st.optimizer = use_stage_measures ? measured->stages[size_t(s)].optimizer
                                      : double(f.params) * 36.0 / cfg.cluster.memory_bandwidth;
    // fp32 weights and gradients, and Adam's two moments (or their 1/D shard).
    f.model_state_bytes = double(f.params) * (8.0 + 8.0 / (sharded ? D : 1));
    f.in_flight = max_in_flight(pipeline_program(P, chunks, s, cfg.micro_batches()));
    // Activations: every layer of the micro-batches in flight (each holds one
    // chunk's layers); with full recomputation their inputs, plus the whole
    // activations of the one layer being recomputed.
    f.activation_bytes_per_layer = layer_activation_bytes(cfg);
    f.activation_bytes = f.in_flight * double(Ls / chunks) * f.activation_bytes_per_layer;
    if (cfg.recompute_activations) {
      PlanConfig kept = cfg;
      kept.recompute_activations = false;
      f.activation_bytes += layer_activation_bytes(kept);
    }
    if (sp) {
      // Sequence parallelism: the LayerNorm and row-parallel bias gradients are
      // partial sums per TP rank, summed over TP once per iteration on the gradients' wire.
      const double elems = 6.0 * C * (cfg.model.num_layers / P) + (last ? 2.0 * C : 0.0);
      st.sp_grad_allreduce = ring_allreduce_seconds(elems * gbv, T, tp_link);
    }
    if (sharded) {
      // Each rank updates its 1/D, then every region (bucket, and FE's word
      // embedding) is all-gathered: after the update on the main thread, or
      // overlapped with the next forward on a thread of its own (the DP
      // reducer's per-step cost), each region waited for where forward first
      // reads it.
      st.optimizer /= D;
      struct Region {
        int64_t offset, numel;
      };
      std::vector<Region> regions;
      for (const GradBucket& b : buckets) regions.push_back({b.begin, b.end - b.begin});
      for (const auto& t : pl.tensors())
        if (fused(t)) regions.push_back({t.offset, t.numel});
      std::sort(regions.begin(), regions.end(), [](const Region& x, const Region& y) { return x.offset < y.offset; });
      // Where each chunk's forward first reads a tensor: the share of the
      // chunk's forward FLOPs that runs before (embedding first, then the
      // layers, the final LayerNorm and the head).
      const int per_chunk = Ls / chunks;
      auto chunk_flops = [&](int c) {
        return per_chunk * layer_forward_flops(cfg) + (last && c == chunks - 1 ? 2.0 * N * C * V : 0.0);
      };
      struct Use {
        int64_t begin, end;
        int chunk;
        double before;
      };
      std::vector<Use> uses;
      auto end_of = [&](int64_t offset) {
        for (const auto& t : pl.tensors())
          if (t.offset == offset) return t.offset + t.numel;
        return offset;
      };
      if (first) uses.push_back({pl.word_embedding, end_of(pl.position_embedding), 0, 0.0});
      for (int l = 0; l < pl.num_local_layers(); ++l)
        uses.push_back({pl.layer(l).ln1_w, end_of(pl.layer(l).fcproj_b), l / per_chunk,
                        (l % per_chunk) * layer_forward_flops(cfg) / chunk_flops(l / per_chunk)});
      if (last) {
        const double before = per_chunk * layer_forward_flops(cfg) / chunk_flops(chunks - 1);
        uses.push_back({pl.final_ln_w, end_of(pl.final_ln_b), chunks - 1, before});
        if (pl.head_weight != pl.word_embedding) uses.push_back({pl.head_weight, end_of(pl.head_weight), chunks - 1, before});
      }
      LinkSpec main_link = dp_link;  // the blocking gather runs on the main thread
      main_link.latency = main_link.message_latency();
      for (const Region& r : regions) {
        const double bytes = double(r.numel) * bpv;
        if (cfg.overlap_param_gather) {
          const Use* use = nullptr;
          for (const Use& u : uses)
            if (r.offset >= u.begin && r.offset < u.end) use = &u;
          OCC_CHECK(use, "internal: parameter region at {} is read by no forward", r.offset);
          st.param_gather_regions.push_back(
              {ring_allgather_seconds(bytes, D, dp_link, dp_sharing), use->chunk, use->before});
        } else {
          st.param_allgather += ring_allgather_seconds(bytes, D, main_link, dp_sharing);
        }
      }
      f.dp_bytes += (D - 1.0) / D * double(f.params) * bpv;
      f.dp_dense_bytes += (D - 1.0) / D * double(f.params) * bpv;
    }
    in.stages.push_back(st);
    out.facts.push_back(f);
  }

  // Tied word embedding: baseline {first, last} pair; FE {first, last} x DP.
  out.embedding_bytes = V / T * C * gbv;
  std::vector<int> emb_group;
  const bool fe = cfg.emb_comm_opt;
  for (int d = 0; d < (fe ? D : 1); ++d) {
    emb_group.push_back(place.rank(0, d, 0));
    if (P > 1) emb_group.push_back(place.rank(P - 1, d, 0));
  }
  in.embedding_sync_on = emb_group.size() > 1;
  in.embedding_sync = ring_allreduce_seconds(out.embedding_bytes, int(emb_group.size()), place.link(emb_group),
                                             place.link_sharing(emb_group, 0));
  std::vector<int> model_group, world;
  for (int s = 0; s < P; ++s)
    for (int t = 0; t < T; ++t) model_group.push_back(place.rank(s, 0, t));
  for (int r = 0; r < T * P * D; ++r) world.push_back(r);
  // Scalar all-reduces on the main thread: per-message latency, like p2p sends.
  auto scalar_link = [&](const std::vector<int>& ranks) {
    LinkSpec l = place.link(ranks);
    l.latency = l.message_latency();
    return l;
  };
  in.grad_norm_sync = ring_allreduce_seconds(8, int(model_group.size()), scalar_link(model_group));
  in.loss_sync = ring_allreduce_seconds(8, int(world.size()), scalar_link(world));
  return out;
}

}  // namespace occ::plan
