#pragma once
// Everything a training run is configured by (Megatron flag names on the
// command line: see apps/commands/train_flags.cpp). Saved into checkpoints.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "compress/compressed_backprop.h"
#include "core/device.h"
#include "core/wire_format.h"
#include "data/tokenizer.h"
#include "compress/compressed_activations.h"
#include "compress/dp_compressor.h"
#include "data/training_data.h"
#include "model/config.h"
#include "train/adamw.h"
#include "train/diloco_config.h"
#include "train/exit_control.h"
#include "train/loss_scaler.h"
#include "train/lr_schedule.h"
#include "train/tensorboard_log.h"

namespace occ {

// The tokenizer a saved run names in its config (TrainOptions::to_json()); a
// checkpoint from before GPT-2 BPE support gives its SentencePiece model only.
TokenizerSpec tokenizer_from_config(const nlohmann::json& config);

// The model's architecture fields as checkpoints record them (in to_json()):
// normalization, norm_epsilon, swiglu, ffn_hidden_size, position_embedding_type,
// rotary_base, rotary_percent, num_query_groups (k/v heads), untie_embeddings_and_
// output_weights, add_bias_linear.
nlohmann::json architecture_json(const GptConfig& model);
// Sets m's architecture from a saved config (fields absent: GPT-2's defaults, as
// they were). m's shape (hidden size, heads) must be set first. Throws a one-line
// occ::Error naming `path` on a malformed field.
void architecture_from_json(const nlohmann::json& config, GptConfig& m, const std::string& path);

struct TrainOptions {
  GptConfig model;
  int tensor_parallel = 1, pipeline_parallel = 1;
  // --num-layers-per-virtual-pipeline-stage: interleaved 1F1B with model
  // chunks of this many layers (0: the plain schedule).
  int layers_per_virtual_stage = 0;
  int micro_batch_size = 4;
  int global_batch_size = 16;
  int64_t train_iters = 100;
  // --train-samples: a sample-based run (Megatron's): train_iters becomes
  // train_samples / global_batch_size (resolve_train_samples()), the training set
  // is asked for train_samples, and the learning-rate schedule counts samples.
  int64_t train_samples = 0;
  // Learning rate: warm-up in iterations (samples), or as a fraction of train_iters
  // (train_samples) when lr_warmup_iters < 0 (lr_warmup_samples < 0); decay over
  // lr_decay_iters (lr_decay_samples), by default the whole run.
  float lr = 6e-4f, min_lr = 6e-5f;
  std::string lr_decay_style = "cosine";
  float lr_warmup_fraction = 0.01f;
  int64_t lr_warmup_iters = -1, lr_decay_iters = -1;
  int64_t lr_warmup_samples = -1, lr_decay_samples = -1;
  AdamWConfig adam;
  float clip_grad = 1.0f;
  uint64_t seed = 1234;
  // Data (data/training_data.h): --data-path PREFIX or W1 P1 W2 P2 ... (Megatron's
  // blend) divided by --split, or the sets' own blends (exclusive with those two).
  std::vector<std::string> data_path, train_data_path, valid_data_path, test_data_path;
  std::string split = "949,50,1";
  std::string data_cache_path;  // --data-cache-path: where the data indices are cached ("" = beside each dataset)
  TokenizerSpec tokenizer;
  int64_t eval_interval = 100, eval_iters = 10;
  // --eval-fixed-set: every evaluation reads the same --eval-iters global batches (the
  // validation split's first), so a loss curve compares iterations on one fixed set (the
  // time-to-target race) instead of Megatron's stream that reads on at each evaluation.
  bool eval_fixed_set = false;
  // Logging, checkpoints.
  int64_t log_interval = 1;
  std::string save, load, metrics_path, trace_path;
  // Megatron's --finetune: --load's weights only (any saved layout), iteration 0, a fresh
  // optimizer; --no-load-optim: the weights and position without Adam's moments;
  // --no-load-rng: accepted (our checkpoints hold no RNG state: dropout and data order are
  // functions of the seed and the position).
  bool finetune = false, no_load_optim = false, no_load_rng = false;
  int64_t save_interval = 0;
  // --async-save (Megatron's flag): a save's tensors are copied to host memory
  // at the iteration boundary and written by a thread while training goes on
  // (train/checkpoint_writer.h).
  bool async_save = false;
  int keep_last = 0;          // --keep-last K: keep the K newest checkpoints under --save (0: all, as Megatron)
  int64_t ckpt_step = -1;     // --ckpt-step N (Megatron's): load iteration N of --load, not the latest
  // --heartbeat-dir (set by `optimus-cc launch`): each rank's heartbeat file (core/heartbeat.h).
  std::string heartbeat_dir;
  double debug_save_delay_s = 0;  // test-only (hidden flag): the checkpoint writer waits this long before writing
  TensorBoardOptions tensorboard;  // --tensorboard-dir and its Megatron companions
  // Backend and memory.
  std::string device_name;                  // --device as given ("" = default_device())
  Device device = Device::Cpu;              // resolved from device_name by resolve_device()
  std::string comm_backend_name = "auto";   // --comm-backend (comm/comm_backend.h), checked by validate()
  bool recompute_activations = false;       // --recompute-activations (Megatron: selective)
  std::string recompute_granularity;        // --recompute-granularity selective|full ("" = none)
  bool bf16 = false, fp16 = false;          // --bf16 / --fp16 (Megatron's mixed precision)
  std::string attention_backend = "auto";   // --attention-backend auto|flash|fused|gemm (the GPU's kernels)
  LossScaleConfig loss_scale;               // --fp16's loss scaling
  Precision precision() const { return bf16 ? Precision::Bf16 : fp16 ? Precision::Fp16 : Precision::Fp32; }
  // What uncompressed values travel in (core/wire_format.h): a --bf16 / --fp16
  // run's activations, their TP sums and the gathered parameters in 16 bits,
  // gradients in fp32, unless these say otherwise.
  bool tp_reduce_in_fp32 = false;    // --tp-reduce-in-fp32: TP / SP activation sums in fp32, rounded once
  bool grad_reduce_in_bf16 = false;  // --grad-reduce-in-bf16: DP, embedding and SP parameter gradients in bf16
  bool debug_fp32_wire = false;      // test only (hidden): every class in fp32, the wire before issue 40
  WireFormats wire_formats() const {
    return WireFormats::for_run(precision(), tp_reduce_in_fp32, grad_reduce_in_bf16, debug_fp32_wire);
  }
  // What backward recomputes (from the two flags above, as Megatron reads them).
  Recompute recompute() const;
  // Sets `device` from --device (or the default); throws on an unknown name.
  void resolve_device();
  // --attention-backend against the device, the precision and the head size.
  void validate_attention_backend() const;
  // Distributed runs.
  int64_t dp_bucket_elems = 1 << 18;  // gradient elements per data-parallel all-reduce bucket
  bool use_distributed_optimizer = false;  // ZeRO-1: Adam state sharded over DP (parallel/optimizer_shards.h)
  // --overlap-param-gather: that optimizer's parameter all-gather runs beside
  // the next iteration's forward, bucket by bucket (parallel/param_gather.h).
  bool overlap_param_gather = false;
  // --sequence-parallel (T > 1): the residual stream between the tensor-parallel
  // regions is split over the TP ranks by rows (parallel/sequence_parallel.h).
  bool sequence_parallel = false;
  double comm_timeout_s = 60.0;      // longest wait on the network before the job is aborted
  ExitOptions exit;                  // --exit-signal-handler, --exit-interval, --exit-duration-in-mins
  bool override_data_check = false;  // --override-data-check: resume on a dataset other than the checkpoint's
  int64_t skip_nonfinite = 0;        // --skip-nonfinite N: iterations with a non-finite loss/norm that may be skipped
  int64_t debug_inject_nan = 0;      // test-only (hidden flag): a NaN gradient at this iteration on the last stage
  int64_t debug_inject_nan_dp = 0;   // test-only (hidden flag): ... in the first DP-compressed gradient, before encoding
  std::string debug_dump_tokens;     // test-only (hidden flag): train/token_dump.h
  // Test-only (hidden flag): on the CPU, route every transfer through the host
  // staging a GPU job uses (core/host_staging.h), so that path runs in CI.
  bool debug_host_staging = false;
  // Test-only (hidden flag): the most logits one classifier chunk holds (0: the
  // model's default), so that small test models run the chunked loss in pieces.
  int64_t debug_classifier_values = 0;
  // Whether this job stages its transfers through host memory: on a GPU with
  // more than one rank, or forced by --debug-host-staging.
  bool host_staged(int world_size) const {
    return debug_host_staging || (device != Device::Cpu && world_size > 1);
  }
  // Optimus-CC (see compress/).
  CompressedBackpropConfig cb;       // CB, LEP, EC
  GradCompressionConfig grad_comp;   // DP PowerSGD (or another method), SC
  ActivationCompressionConfig activation_comp;  // forward activations between stages (beyond the paper)
  bool emb_comm_opt = false;         // FE
  bool check_lep = false;            // record LEP error vs activation change (paper Fig. 11)
  // DiLoCo / Streaming DiLoCo instead of per-step data parallelism (train/diloco.h).
  DilocoConfig diloco;
  std::string debug_diloco_dump;     // test-only (hidden flag): DiLoCo's outer steps written here
  // DP error feedback: --grad-comp-error-feedback, or --use-error-feedback (the
  // prototype's one flag for LEP and DP error feedback). Sets g.error_feedback.
  void resolve_error_feedback(GradCompressionConfig& g) const { g.error_feedback = g.error_feedback || cb.lazy_error; }
  // CB or DP compression that keeps state between iterations (PowerSGD's warm
  // starts, LEP / error-feedback residuals); int8, fp8, topk and sign alone keep none.
  bool stateful_compression() const {
    return (cb.enabled && (cb.method == CompressionMethod::PowerSgd || cb.lazy_error)) ||
           (grad_comp.enabled &&
            (grad_comp.method == CompressionMethod::PowerSgd || grad_comp.error_feedback || cb.lazy_error));
  }

  int64_t num_micro_batches(int dp) const { return global_batch_size / (micro_batch_size * dp); }
  // Model chunks per pipeline rank (1 without interleaving); valid after validate().
  int model_chunks() const {
    const int per_stage = pipeline_parallel > 0 ? model.num_layers / pipeline_parallel : 0;
    return layers_per_virtual_stage > 0 && per_stage >= layers_per_virtual_stage ? per_stage / layers_per_virtual_stage
                                                                                 : 1;
  }
  LrSchedule lr_schedule() const;
  // --train-samples given: train_iters = train_samples / global_batch_size (throws
  // when that is no iteration). Call once, before validate().
  void resolve_train_samples();
  // Megatron's get_train_valid_test_num_samples: train train_iters x global batch
  // (or --train-samples); validation (train_iters / eval_interval + 1) x eval_iters
  // x global batch, enough for every evaluation of the run to read on (with
  // --eval-interval 0, the last only; with --eval-fixed-set one evaluation's); test
  // eval_iters x global batch.
  int64_t valid_samples() const;
  int64_t test_samples() const { return eval_iters * global_batch_size; }
  // The data flags as data/ takes them (parses the blends: throws a one-line occ::Error).
  DataSpec data_spec() const;
  // Checks the flags of a job of this layout, wherever it would run: what does not
  // depend on data, tokenizer or this machine's devices (throws occ::Error). The one
  // validation train and plan share.
  void validate(const ParallelLayout& layout) const;
  void validate_interleaving(const ParallelLayout& layout) const;
  // Every setting that changes the numbers a rank computes (to_json() and the
  // rest: precision, optimizer and schedule details, buckets, recomputation,
  // guards); all ranks of a job must agree on it (train checks at start-up).
  nlohmann::json math_json() const;
  nlohmann::json to_json() const;  // the model shape and training settings, for checkpoints
};

}  // namespace occ
