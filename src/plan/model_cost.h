#pragma once
// From a model, a layout, a cluster and a compression plan to the durations
// the schedule simulator needs: FLOPs per micro-batch per stage (Megatron's
// count: 24·N·C² + 4·N·s·C per layer forward, 2·N·C·V for the LM head,
// backward twice the forward, plus one more forward with activation
// recomputation), message and bucket sizes taken from the engine's own
// parameter layout and bucketing (model/params.h, parallel/grad_sync.h), and
// compression kernel costs as a roofline of FLOPs and memory traffic, and
// the wire sizes of every method taken from compress/compressor_factory.h.
#include <optional>
#include <string>
#include <vector>

#include "compress/compressed_backprop.h"
#include "compress/compressed_activations.h"
#include "compress/dp_compressor.h"
#include "train/diloco_config.h"
#include "train/options.h"
#include "model/config.h"
#include "core/layout.h"
#include "plan/cluster.h"
#include "plan/diloco_cost.h"
#include "plan/schedule_sim.h"

namespace occ::plan {

struct PlanConfig {
  GptConfig model;
  int micro_batch_size = 8, global_batch_size = 512;
  int tp = 1, pp = 1, dp = 1;
  int layers_per_virtual_stage = 0;  // interleaved 1F1B (0: plain)
  bool use_distributed_optimizer = false;  // ZeRO-1: reduce-scatter, shard update, parameter all-gather
  // --overlap-param-gather: that all-gather runs beside the next forward, region
  // by region, each waited for where the forward first reads it.
  bool overlap_param_gather = false;
  // --sequence-parallel (Megatron's, T > 1): LayerNorm / dropout regions hold
  // [s/T, b, h]; per layer and direction 2 reduce-scatters + 2 all-gathers
  // instead of 2 all-reduces (the same ring volume); Megatron's backward
  // all-gathers each column-parallel layer's input again for its weight
  // gradient, hidden behind the input gradient's GEMM where it is shorter;
  // pipeline messages are each rank's own slice (no all-gather after a
  // receive); LayerNorm and row-parallel bias gradients summed over TP once per
  // iteration; activation memory per Korthikanti et al. (2022).
  bool sequence_parallel = false;
  CompressedBackpropConfig cb;
  GradCompressionConfig grad_comp;
  ActivationCompressionConfig activation_comp;
  bool emb_comm_opt = false;
  DilocoConfig diloco;             // instead of per-step DP averaging (plan/diloco_cost.h)
  int64_t dp_bucket_elems = 1 << 18;
  // Bytes per value on the wire (core/wire_format.h; `plan` sets them from the
  // run's flags: a --bf16 / --fp16 run's activations, TP sums and parameters 2,
  // its gradients 4, or 2 with --grad-reduce-in-bf16).
  int bytes_per_value = 4;         // activations, TP collectives, pipeline messages, parameters
  // Gradients on the DP wire (buckets, DP compression factors, embedding sync);
  // 0: bytes_per_value. Megatron's --bf16 all-reduces fp32 gradients (4).
  int grad_bytes_per_value = 0;
  int grad_bytes() const { return grad_bytes_per_value > 0 ? grad_bytes_per_value : bytes_per_value; }
  // TP sums of activations (all-reduce, SP reduce-scatter); 0: bytes_per_value (--tp-reduce-in-fp32: 4).
  int tp_sum_bytes_per_value = 0;
  int tp_sum_bytes() const { return tp_sum_bytes_per_value > 0 ? tp_sum_bytes_per_value : bytes_per_value; }
  // PowerSGD's factors (CB and DP); 0: the values' own (bytes_per_value on the
  // pipeline, grad_bytes() on DP), as a Megatron-style model sends them. The
  // engine's codecs send fp32 words: `plan` sets 4 from a run's flags.
  int factor_bytes_per_value = 0;
  bool recompute_activations = false;  // full recomputation (Megatron's --checkpoint-activations): FLOPs and memory
  bool selective_recompute = false;    // attention's softmax rebuilt in backward: memory only (its FLOPs are small)
  bool blocking_sends = false;     // Megatron's blocking p2p (ours are nonblocking)
  ClusterSpec cluster;

  int micro_batches() const { return global_batch_size / (micro_batch_size * dp); }
  int chunks() const {
    return layers_per_virtual_stage > 0 ? model.num_layers / pp / layers_per_virtual_stage : 1;
  }
  int64_t tokens() const { return int64_t(micro_batch_size) * model.seq_length; }
  // The job these settings describe, as train takes its flags (other settings at
  // train's defaults).
  TrainOptions job_options() const;
  // Throws occ::UsageError naming the first inconsistency: the job's flags by
  // TrainOptions::validate (train's own validation), then the plan's own.
  void validate() const;
};

// The cluster flags (--nodes, --devices-per-node, speeds, links), each named when
// out of range (occ::UsageError). Part of PlanConfig::validate().
void validate_cluster(const ClusterSpec& cluster);

// Measured per-stage costs that replace the model's estimates (calibration).
struct StageMeasure {
  double forward = 0, backward = 0;  // compute seconds per micro-batch (TP collectives excluded)
  double tp_forward = 0, tp_backward = 0;  // TP all-reduce seconds per micro-batch
  double optimizer = 0;              // seconds per iteration
};
struct Measured {
  std::vector<StageMeasure> stages;  // used only when the plan has the calibrated shape and layout
  double achieved_flops = 0;         // model FLOP/s, for compression kernels (and other shapes)
  double compress_efficiency = 0;    // > 0: fitted from a compressed run
};

struct StageFacts {
  double forward_flops = 0, backward_flops = 0;  // per micro-batch, per rank
  int64_t params = 0;                            // elements of one rank's shard
  int64_t compressed_params = 0;                 // of them, DP PowerSGD-compressed (SC-selected stages)
  double dp_bytes = 0;                           // per rank per iteration on the DP wire (ring)
  double dp_dense_bytes = 0;                     // the same without DP compression
  int buckets = 0;
  // Memory of one rank: fp32 weights, gradients and Adam moments (sharded over
  // DP by the distributed optimizer), and the micro-batches whose
  // activations the schedule holds at once (each of a chunk's layers).
  double model_state_bytes = 0;
  double outer_state_bytes = 0;  // DiLoCo's outer parameters and momentum, and EF residual (host memory)
  int in_flight = 0;
  // Activations of one transformer layer for one micro-batch, as kept for its
  // backward (Korthikanti et al. 2022, Sec. 4, with `bytes_per_value` values and
  // 1-byte dropout masks; with full recomputation the layer's input only), and
  // the most this rank holds at once: every layer of the micro-batches in
  // flight (+ one layer's whole activations while it is recomputed).
  double activation_bytes_per_layer = 0, activation_bytes = 0;
  double tp_bytes_forward = 0, tp_bytes_backward = 0;  // TP ring bytes per rank per micro-batch
  // Of StageTimes::forward / backward, the TP collectives' seconds (per micro-batch).
  double tp_seconds_forward = 0, tp_seconds_backward = 0;
};

struct CostModel {
  SimInput input;
  std::vector<StageFacts> facts;
  double pp_message_bytes = 0, pp_compressed_bytes = 0;  // per TP rank
  double pp_forward_bytes = 0;                           // an activation message as sent (compressed or not)
  double embedding_bytes = 0;                            // word-embedding gradient per rank
  std::string compute_source;                            // "model FLOPs" or "calibrated ..."
  DilocoCost diloco;                                     // the outer syncs (off without DiLoCo)
};

// The mean iteration: the simulated one (an inner step under DiLoCo) plus
// DiLoCo's outer syncs amortized over their round.
double mean_iteration_seconds(const CostModel& model, double simulated_iteration);

CostModel build_cost_model(const PlanConfig& cfg, const Measured* measured = nullptr);

// Ranks of `stage` on the node of `rank`: they share that node's NIC when
// they all talk across nodes at once (DP all-reduces, pipeline sends).
int node_sharing(const PlanConfig& cfg, int rank, int stage);
inline int rank_of(const PlanConfig& cfg, int pp, int dp, int tp) {
  ParallelLayout l;  // Megatron's rank layout, as the engine computes it
  l.tp_size = cfg.tp, l.pp_size = cfg.pp, l.dp_size = cfg.dp, l.tp_rank = tp, l.pp_rank = pp, l.dp_rank = dp;
  return l.global_rank();
}

// The full-model forward+backward FLOPs of one iteration (all micro-batches, all ranks).
double iteration_flops(const PlanConfig& cfg);

// Activation bytes one transformer layer keeps for its backward, per micro-batch
// and TP rank (Korthikanti et al. 2022: s·b·h·(10 + 24/t + 5·a·s/(h·t)) without
// sequence parallelism, s·b·h/t·(34 + 5·a·s/h) with it, for 2-byte values; the
// attention term drops with selective recomputation). Full recomputation keeps
// the layer's input alone (s·b·h values, / t with sequence parallelism).
double layer_activation_bytes(const PlanConfig& cfg);

}  // namespace occ::plan
