#include "apps/commands/train_flags.h"

#include "apps/commands/diloco_flags.h"
#include "core/error.h"

namespace occ::cmd {

void add_model_flags(CLI::App& app, GptConfig& m) {
  app.add_option("--num-layers", m.num_layers, "transformer layers")->capture_default_str();
  app.add_option("--hidden-size", m.hidden_size, "hidden size")->capture_default_str();
  app.add_option("--num-attention-heads", m.num_attention_heads, "attention heads")->capture_default_str();
  app.add_option("--seq-length", m.seq_length, "tokens per sample")->capture_default_str();
  app.add_option("--max-position-embeddings", m.max_position_embeddings, "learned positions (>= seq-length)")
      ->capture_default_str();
  app.add_option("--make-vocab-size-divisible-by", m.make_vocab_size_divisible_by, "vocabulary padding multiple")
      ->capture_default_str();
  app.add_option("--hidden-dropout", m.hidden_dropout, "dropout on embeddings and residual branches")
      ->capture_default_str();
  app.add_option("--attention-dropout", m.attention_dropout, "dropout on attention probabilities")
      ->capture_default_str();
  app.add_option("--init-method-std", m.init_method_std, "std of the normal init")->capture_default_str();
  // The Llama family's choices (Megatron's flags; the defaults are GPT-2).
  app.add_option_function<std::string>(
         "--normalization", [&m](const std::string& v) { m.normalization = parse_normalization(v); },
         "LayerNorm (GPT-2) | RMSNorm (Llama: x / rms(x) * w, no bias)")
      ->default_str(normalization_name(m.normalization));
  app.add_option("--norm-epsilon", m.norm_epsilon, "epsilon of LayerNorm / RMSNorm")->capture_default_str();
  app.add_flag("--swiglu", m.swiglu,
               "SwiGLU MLP: down(silu(gate(x)) * up(x)), gate and up packed in one column-parallel weight");
  app.add_option("--ffn-hidden-size", m.ffn_hidden,
                 "the MLP's inner width (default: 4 x --hidden-size; with --swiglu Megatron's "
                 "int(8 x hidden / 3 / 64) x 64)");
  app.add_option_function<std::string>(
         "--position-embedding-type",
         [&m](const std::string& v) { m.position_embedding = parse_position_embedding(v); },
         "learned_absolute (GPT-2) | rope (rotary embeddings on q and k in every layer, rotate-half pairs)")
      ->default_str(position_embedding_name(m.position_embedding));
  app.add_option("--rotary-base", m.rotary_base, "RoPE's base (Llama 2: 10000, Llama 3: 500000)")
      ->capture_default_str();
  app.add_option("--rotary-percent", m.rotary_percent, "share of each head's dimensions RoPE rotates")
      ->capture_default_str();
  app.add_flag("--group-query-attention", m.group_query_attention,
               "grouped-query attention: --num-query-groups k/v heads, each shared by heads / groups query heads");
  app.add_option("--num-query-groups", m.num_query_groups, "--group-query-attention: k/v heads (query groups)")
      ->capture_default_str();
  app.add_flag("--untie-embeddings-and-output-weights", m.untie_embeddings_and_output_weights,
               "an output layer of its own (vocab-parallel) instead of the word embedding");
  app.add_flag_callback("--disable-bias-linear", [&m] { m.add_bias_linear = false; },
                        "no biases in the linear layers (QKV, attention output, MLP)");
}

void refuse_inapplicable_model_flags(const CLI::App& app, const GptConfig& m) {
  auto given = [&app](const char* flag) { return app.count(flag) > 0; };
  auto refuse = [](const char* flag, const std::string& why, const std::string& fix) {
    throw UsageError(fmt::format("{} {}; drop it or {}", flag, why, fix));
  };
  // Zero is not a width: the default is spelled by leaving the flag out.
  if (given("--ffn-hidden-size") && m.ffn_hidden <= 0)
    throw UsageError(fmt::format("--ffn-hidden-size must be >= 1 (got {}); leave it out for the default (4 x "
                                 "--hidden-size, or Megatron's SwiGLU width with --swiglu)",
                                 m.ffn_hidden));
  if (given("--num-query-groups") && !m.group_query_attention)
    refuse("--num-query-groups", "has no effect without --group-query-attention", "add --group-query-attention");
  for (const char* f : {"--rotary-base", "--rotary-percent"})
    if (given(f) && m.position_embedding != PositionEmbedding::Rope)
      refuse(f, "has no effect without --position-embedding-type rope", "add --position-embedding-type rope");
}

void add_optimizer_flags(CLI::App& app, TrainOptions& o) {
  app.add_option("--lr", o.lr, "peak learning rate")->capture_default_str();
  app.add_option("--min-lr", o.min_lr, "final learning rate")->capture_default_str();
  app.add_option("--lr-decay-style", o.lr_decay_style, "cosine | linear | constant")->capture_default_str();
  app.add_option("--lr-warmup-fraction", o.lr_warmup_fraction, "warm-up as a fraction of --train-iters")
      ->capture_default_str();
  app.add_option("--lr-warmup-iters", o.lr_warmup_iters, "warm-up iterations (overrides the fraction)");
  app.add_option("--lr-decay-iters", o.lr_decay_iters, "iterations of decay (default: --train-iters)");
  app.add_option("--lr-warmup-samples", o.lr_warmup_samples,
                 "warm-up samples, with --train-samples (overrides the fraction, then of --train-samples)");
  app.add_option("--lr-decay-samples", o.lr_decay_samples, "samples of decay, with --train-samples (default: all)");
  app.add_option("--weight-decay", o.adam.weight_decay, "AdamW weight decay (not on biases / LayerNorm)")
      ->capture_default_str();
  app.add_option("--adam-beta1", o.adam.beta1)->capture_default_str();
  app.add_option("--adam-beta2", o.adam.beta2)->capture_default_str();
  app.add_option("--adam-eps", o.adam.eps)->capture_default_str();
  app.add_option("--clip-grad", o.clip_grad, "global grad-norm clip (0: off)")->capture_default_str();
  app.add_option("--seed", o.seed, "seed of init, dropout and data order")->capture_default_str();
}

void add_attention_backend_flag(CLI::App& app, TrainOptions& o) {
  app.add_option("--attention-backend", o.attention_backend,
                 "the GPU's attention kernels: auto (flash in a --bf16/--fp16 step where the head size allows, else "
                 "fused), flash (tensor cores: bf16/fp16 q/k/v, head dims 64 and 128, dropout masks drawn in the "
                 "kernel, identical to the CPU's), fused (fp32 flash-style kernels on CUDA cores: the twin), gemm "
                 "(batched fp32 GEMMs keeping the probabilities)")
      ->capture_default_str();
}

void add_train_flags(CLI::App& app, TrainOptions& o) {
  add_model_flags(app, o.model);
  add_optimizer_flags(app, o);
  app.add_option("--micro-batch-size", o.micro_batch_size)->capture_default_str();
  app.add_option("--global-batch-size", o.global_batch_size)->capture_default_str();
  app.add_option("--train-iters", o.train_iters)->capture_default_str();
  app.add_option("--train-samples", o.train_samples,
                 "train on this many samples instead of --train-iters (iterations: samples / --global-batch-size; the "
                 "learning-rate schedule counts samples)");
  app.add_option("--tensor-model-parallel-size", o.tensor_parallel)->capture_default_str();
  app.add_option("--pipeline-model-parallel-size", o.pipeline_parallel)->capture_default_str();
  app.add_option("--num-layers-per-virtual-pipeline-stage", o.layers_per_virtual_stage,
                 "interleaved 1F1B: model chunks of N layers, placed round-robin over the pipeline stages");
  app.add_option("--data-path", o.data_path,
                 "dataset prefix (PREFIX.bin / PREFIX.idx), or a blend of weight / prefix pairs: W1 P1 W2 P2 ... "
                 "(weights normalised; Megatron's blending), each dataset divided by --split");
  app.add_option("--train-data-path", o.train_data_path,
                 "the training set: PREFIX or W1 P1 W2 P2 ... (instead of --data-path and --split)");
  app.add_option("--valid-data-path", o.valid_data_path, "the validation set (with --train-data-path): PREFIX or a blend");
  app.add_option("--test-data-path", o.test_data_path,
                 "the test set (with --train-data-path), evaluated after the last iteration: PREFIX or a blend");
  add_tokenizer_flags(app, o.tokenizer);
  app.add_option("--split", o.split, "train,valid,test weights over each --data-path dataset's documents")
      ->capture_default_str();
  app.add_option("--data-cache-path", o.data_cache_path,
                 "folder of the data index cache (.npy files built once per job, mapped by every rank; default: "
                 "PREFIX/cache/GPTDataset_indices beside each dataset, as Megatron's)");
  app.add_option("--eval-interval", o.eval_interval, "validate every N iterations (0: only at the end)")
      ->capture_default_str();
  app.add_option("--eval-iters", o.eval_iters, "validation batches per evaluation")->capture_default_str();
  app.add_flag("--eval-fixed-set", o.eval_fixed_set,
               "every evaluation reads the same --eval-iters batches (the validation split's first) instead of "
               "reading on: one fixed set for a loss curve");
  app.add_option("--log-interval", o.log_interval)->capture_default_str();
  app.add_option("--save", o.save, "checkpoint directory");
  app.add_option("--save-interval", o.save_interval, "save every N iterations (and at the end)");
  app.add_option("--load", o.load, "resume from this checkpoint directory");
  app.add_flag("--finetune", o.finetune,
               "with --load: start from its weights only (any saved layout; e.g. an import-hf checkpoint) at "
               "iteration 0 with a fresh optimizer (Megatron's --finetune)");
  app.add_flag("--no-load-optim", o.no_load_optim, "with --load: do not load the optimizer state (Adam's moments)");
  app.add_flag("--no-load-rng", o.no_load_rng,
               "accepted for Megatron's command lines: checkpoints hold no RNG state (dropout and data order follow "
               "the seed and position)");
  app.add_option("--ckpt-step", o.ckpt_step,
                 "with --load: resume from this saved iteration instead of the latest one (Megatron's flag)");
  app.add_option("--keep-last", o.keep_last,
                 "keep only the K newest checkpoints under --save, deleting older ones after each save (0: keep all)")
      ->capture_default_str();
  app.add_flag("--async-save", o.async_save,
               "write checkpoints in the background: the tensors are copied to host memory at the iteration "
               "boundary and written, fsynced and committed while training goes on (Megatron's flag)");
  app.add_option("--heartbeat-dir", o.heartbeat_dir,
                 "each rank keeps a heartbeat file here (where it is and what it waits for); set by `optimus-cc "
                 "launch`, which reads them to detect hangs");
  app.add_option("--metrics", o.metrics_path, "append one JSON object per iteration to this file");
  app.add_option("--trace", o.trace_path, "write a Chrome/Perfetto trace of the run (one process per rank)");
  app.add_option("--tensorboard-dir", o.tensorboard.dir,
                 "write TensorBoard scalars (loss, learning rate, grad norm, validation and test loss, bytes per "
                 "traffic class, ...) into an event file in this directory");
  app.add_option("--tensorboard-log-interval", o.tensorboard.log_interval,
                 "--tensorboard-dir: write the training scalars every N iterations")
      ->capture_default_str();
  app.add_flag("--log-timers-to-tensorboard", o.tensorboard.timers,
               "--tensorboard-dir: also the iteration time and each timer phase (seconds)");
  app.add_flag("--log-validation-ppl-to-tensorboard", o.tensorboard.validation_ppl,
               "--tensorboard-dir: also the validation (and test) perplexity");
  app.add_flag("--use-distributed-optimizer", o.use_distributed_optimizer,
               "shard Adam's state over the data-parallel ranks (ZeRO-1, as Megatron): gradients reduce-scattered, "
               "each rank updates its shard, parameters all-gathered");
  app.add_flag("--overlap-param-gather", o.overlap_param_gather,
               "with --use-distributed-optimizer: all-gather the updated parameters beside the next iteration's "
               "forward, each bucket waited for just before a layer first reads it (Megatron's flag); the same "
               "values as without it");
  app.add_flag("--sequence-parallel", o.sequence_parallel,
               "with --tensor-model-parallel-size > 1: Megatron's sequence parallelism. The norms, dropout and "
               "residual adds run on each TP rank's share of the tokens; all-gather before and reduce-scatter after "
               "the tensor-parallel layers instead of all-reduces; each rank sends only its share between stages");
  app.add_option("--dp-bucket-size", o.dp_bucket_elems, "gradient elements per data-parallel all-reduce bucket")
      ->capture_default_str();
  app.add_option("--device", o.device_name,
                 "cpu | cuda (default: cuda when this binary has the CUDA backend and a GPU is visible, else cpu)");
  app.add_flag("--recompute-activations", o.recompute_activations,
               "recompute attention's softmax in backward instead of keeping it (Megatron's selective recomputation)");
  app.add_option("--recompute-granularity", o.recompute_granularity,
                 "selective (attention only) | full (every transformer layer is recomputed from its input)");
  app.add_flag("--bf16", o.bf16,
               "bf16 weights, activations and activation gradients in the step; fp32 master weights, gradient "
               "accumulation and optimizer (Megatron's --bf16)");
  app.add_flag("--fp16", o.fp16, "as --bf16 in fp16, with loss scaling (dynamic unless --loss-scale)");
  app.add_flag("--tp-reduce-in-fp32", o.tp_reduce_in_fp32,
               "--bf16/--fp16: sum the tensor-parallel partial activations (all-reduce, sequence parallelism's "
               "reduce-scatter) in fp32 and round once, at twice the bytes; default: reduced in the 16-bit format "
               "as Megatron and NCCL do");
  app.add_flag("--grad-reduce-in-bf16", o.grad_reduce_in_bf16,
               "--bf16/--fp16: reduce the gradients (data-parallel, tied embedding, sequence-parallel norms and "
               "biases) in bf16, half the bytes; default fp32 (Megatron-core's flag)");
  add_attention_backend_flag(app, o);
  app.add_option("--loss-scale", o.loss_scale.loss_scale, "--fp16: a static loss scale (default: dynamic)");
  app.add_option("--initial-loss-scale", o.loss_scale.initial_loss_scale, "--fp16: dynamic scaling's first scale")
      ->capture_default_str();
  app.add_option("--min-loss-scale", o.loss_scale.min_loss_scale, "--fp16: dynamic scaling's floor")
      ->capture_default_str();
  app.add_option("--loss-scale-window", o.loss_scale.loss_scale_window,
                 "--fp16: clean iterations before the dynamic scale doubles")
      ->capture_default_str();
  app.add_option("--hysteresis", o.loss_scale.hysteresis, "--fp16: overflows tolerated before the scale halves")
      ->capture_default_str();
  app.add_option("--comm-backend", o.comm_backend_name,
                 "multi-rank GPU jobs: nccl (one GPU per rank), mpi (host-staged; works when ranks share GPUs), or "
                 "auto (nccl when every rank of a node has its own GPU); an NCCL group that cannot form falls back to "
                 "mpi with the reason")
      ->capture_default_str();
  app.add_option("--comm-timeout", o.comm_timeout_s, "seconds a rank waits on the network before aborting the job")
      ->capture_default_str();
  // Operations (Megatron's names).
  app.add_flag("--exit-signal-handler", o.exit.signal_handler,
               "on SIGTERM or SIGUSR1 (send mpirun SIGUSR1: it forwards it to every rank), finish the iteration, "
               "save a checkpoint (--save) and exit 0; a second signal exits at once");
  app.add_option("--exit-interval", o.exit.interval, "stop (with a checkpoint) after an iteration divisible by N");
  app.add_option("--exit-duration-in-mins", o.exit.duration_mins,
                 "stop (with a checkpoint) after this many minutes of training, agreed across ranks");
  app.add_flag("--override-data-check", o.override_data_check,
               "resume (--load) on a dataset whose document or token count differs from the checkpoint's");
  app.add_option("--skip-nonfinite", o.skip_nonfinite,
                 "skip up to N iterations whose loss or gradient norm is not finite (counted in the metrics) "
                 "instead of stopping at the first")
      ->capture_default_str();
  app.add_option("--debug-inject-nan", o.debug_inject_nan, "test only: a NaN gradient at this iteration")
      ->group("");  // hidden
  app.add_option_function<std::string>(
         "--debug-dump-messages",
         [&o](const std::string& dir) { o.cb.debug_dump = o.activation_comp.debug_dump = dir; },
         "measurement only: each sender keeps its last pipeline messages (and every block method's wire of them) "
         "in DIR (compress/message_dump.h; needs --activation-comp-method / --inter-grad-comp)")
      ->group("");  // hidden
  app.add_option("--debug-inject-nan-dp", o.debug_inject_nan_dp,
                 "test only: a NaN in data-parallel rank 0's first compressed gradient at this iteration, before "
                 "its DP compressor encodes it")
      ->group("");  // hidden
  app.add_option("--debug-save-delay", o.debug_save_delay_s,
                 "test only: the checkpoint writer waits this many seconds before writing a save's files")
      ->group("");  // hidden
  app.add_option("--debug-dump-tokens", o.debug_dump_tokens,
                 "test only: every input-reading rank appends the training samples it reads to PREFIX.rank<R>")
      ->group("");  // hidden
  app.add_flag("--debug-fp32-wire", o.debug_fp32_wire,
               "test only: send every uncompressed value as fp32, as before the wire followed the step's format")
      ->group("");  // hidden
  app.add_flag("--debug-host-staging", o.debug_host_staging,
               "test only: stage every transfer through host copies, as a multi-rank GPU job does")
      ->group("");  // hidden
  app.add_option("--debug-classifier-values", o.debug_classifier_values,
                 "test only: at most this many logits per classifier chunk (small models then run several)")
      ->check(CLI::NonNegativeNumber)
      ->group("");  // hidden
  // Optimus-CC.
  app.add_flag("--inter-grad-comp", o.cb.enabled,
               "CB: compress activation gradients sent backward (PowerSGD unless --inter-grad-comp-method)");
  app.add_option("--inter-grad-comp-rank", o.cb.rank, "CB: PowerSGD rank")->capture_default_str();
  app.add_option_function<std::string>(
         "--inter-grad-comp-method",
         [&o](const std::string& v) {
           o.cb.method = parse_method(v, "--inter-grad-comp-method", pipeline_grad_methods());
         },
         "CB's compressor: powersgd (the paper's, default) | int8 | fp8-e4m3 | fp8-e5m2 | topk | sign | mxfp4 | "
         "nvfp4 | int4 | int3 | int2 | lloydmax2 | lloydmax3 | adaptive");
  app.add_option_function<std::string>(
         "--inter-grad-comp-adaptive-high-fraction",
         [&o](const std::string& v) {
           o.cb.high_fraction = parse_high_fraction(v, "--inter-grad-comp-adaptive-high-fraction");
         },
         "CB with adaptive: the share of 64-value tiles, those of the largest energy, coded at 4 bits (int4); "
         "the rest at 2 (lloydmax2)")
      ->default_str("0.125");
  app.add_option("--inter-grad-comp-topk-fraction", o.cb.topk_fraction,
                 "CB with topk: the share of each row's entries sent")->capture_default_str();
  app.add_option_function<std::string>(
         "--inter-grad-comp-rounding",
         [&o](const std::string& v) { o.cb.stochastic = parse_rounding(v, "--inter-grad-comp-rounding"); },
         "CB with a block method (mxfp4, nvfp4, int4, int3, int2, lloydmax2, lloydmax3, adaptive): nearest (ties to "
         "even) | "
         "stochastic")
      ->default_str("nearest");
  app.add_option_function<std::string>(
         "--inter-grad-comp-rotation",
         [&o](const std::string& v) { o.cb.rotation = parse_rotation(v, "--inter-grad-comp-rotation"); },
         "CB with a block method: none | hadamard | hadamard:BLOCK (a randomized Hadamard rotation in blocks of "
         "BLOCK, a power of two from 2 to 256, default 128, before the code; nothing extra is sent)")
      ->default_str("none");
  app.add_option_function<std::string>(
         "--inter-grad-comp-lossless",
         [&o](const std::string& v) { o.cb.lossless = parse_lossless(v, "--inter-grad-comp-lossless"); },
         "CB with a block method on the CPU backend: none | rans (entropy-code the codes and scales on the host, "
         "lossless: fewer bytes, the same training)")
      ->default_str("none");
  app.add_option_function<std::string>(
         "--activation-comp-method",
         [&o](const std::string& v) {
           o.activation_comp.enabled = v != "none";
           if (o.activation_comp.enabled)
             o.activation_comp.method = parse_method(v, "--activation-comp-method", ActivationCompressionConfig::methods(), "none");
         },
         "compress the activations sent forward between stages: none (default) | int8 | fp8-e4m3 | topk | mxfp4 | "
         "nvfp4 | int4 | int3 | int2 | lloydmax2 | lloydmax3 | adaptive");
  app.add_option_function<std::string>(
         "--activation-comp-adaptive-high-fraction",
         [&o](const std::string& v) {
           o.activation_comp.high_fraction = parse_high_fraction(v, "--activation-comp-adaptive-high-fraction");
         },
         "activation compression with adaptive: the share of tiles coded at 4 bits (as "
         "--inter-grad-comp-adaptive-high-fraction)")
      ->default_str("0.125");
  app.add_option("--activation-comp-topk-fraction", o.activation_comp.topk_fraction,
                 "activation compression with topk: the share of each row's entries sent")->capture_default_str();
  app.add_option_function<std::string>(
         "--activation-comp-rounding",
         [&o](const std::string& v) { o.activation_comp.stochastic = parse_rounding(v, "--activation-comp-rounding"); },
         "activation compression with a block method: nearest (ties to even) | stochastic")
      ->default_str("nearest");
  app.add_option_function<std::string>(
         "--activation-comp-rotation",
         [&o](const std::string& v) { o.activation_comp.rotation = parse_rotation(v, "--activation-comp-rotation"); },
         "activation compression with a block method: none | hadamard | hadamard:BLOCK (as --inter-grad-comp-rotation)")
      ->default_str("none");
  app.add_option_function<std::string>(
         "--activation-comp-lossless",
         [&o](const std::string& v) { o.activation_comp.lossless = parse_lossless(v, "--activation-comp-lossless"); },
         "activation compression with a block method on the CPU backend: none | rans (as --inter-grad-comp-lossless)")
      ->default_str("none");
  app.add_flag("--use-error-feedback", o.cb.lazy_error,
               "LEP on pipeline sends (with --inter-grad-comp) and error feedback on DP compression (with "
               "--grad-comp), for any method");
  app.add_option("--inter-grad-comp-lep-decay", o.cb.lep_decay,
                 "LEP with a decay: the residual joins the next micro-batch's gradient scaled by this, in (0, 1] "
                 "(1, the paper's LEP: nothing forgotten; needs --use-error-feedback)")
      ->capture_default_str();
  app.add_flag("--inter-grad-comp-epilogue-only", o.cb.epilogue_only,
               "EC: compress only the last P - s backward sends of stage s");
  app.add_flag("--emb-comm-opt", o.emb_comm_opt, "FE: fused embedding gradient synchronisation");
  app.add_flag("--grad-comp", o.grad_comp.enabled,
               "compress data-parallel gradients of matrices (PowerSGD unless --grad-comp-method)");
  app.add_option("--grad-comp-rank", o.grad_comp.rank, "DP PowerSGD rank")->capture_default_str();
  app.add_option_function<std::string>(
         "--grad-comp-method",
         [&o](const std::string& v) { o.grad_comp.method = parse_method(v, "--grad-comp-method", all_methods()); },
         "DP compressor: powersgd (default; all-reduced factors) | int8 | fp8-e4m3 | fp8-e5m2 | topk | sign | mxfp4 | "
         "nvfp4 | int4 | int3 | int2 | lloydmax2 | lloydmax3 | adaptive | topk2 (all-gathered, decoded and summed in rank "
         "order)");
  app.add_option_function<std::string>(
         "--grad-comp-adaptive-high-fraction",
         [&o](const std::string& v) {
           o.grad_comp.high_fraction = parse_high_fraction(v, "--grad-comp-adaptive-high-fraction");
         },
         "DP compression with adaptive: the share of tiles coded at 4 bits (as "
         "--inter-grad-comp-adaptive-high-fraction)")
      ->default_str("0.125");
  app.add_option_function<std::string>(
         "--grad-comp-rounding",
         [&o](const std::string& v) { o.grad_comp.stochastic = parse_rounding(v, "--grad-comp-rounding"); },
         "DP compression with a block method: nearest (ties to even) | stochastic")
      ->default_str("nearest");
  app.add_option_function<std::string>(
         "--grad-comp-rotation",
         [&o](const std::string& v) { o.grad_comp.rotation = parse_rotation(v, "--grad-comp-rotation"); },
         "DP compression with a block method: none | hadamard | hadamard:BLOCK (as --inter-grad-comp-rotation; "
         "keyed by the iteration)")
      ->default_str("none");
  app.add_flag("--grad-comp-error-feedback", o.grad_comp.error_feedback,
               "error feedback on DP compression only (--use-error-feedback turns on LEP too)");
  app.add_option("--grad-comp-topk-fraction", o.grad_comp.topk_fraction,
                 "DP compression with topk: the share of each row's entries sent")->capture_default_str();
  app.add_option("--grad-comp-topk-density", o.grad_comp.topk_density,
                 "DP compression with topk2: the share of each chunk's values sent, in (0, 0.25] (2-bit values, "
                 "indices counted)")->capture_default_str();
  app.add_option("--grad-comp-warm-up", o.grad_comp.warmup_fraction,
                 "fraction of iterations that run uncompressed first")->capture_default_str();
  app.add_option("--selective-grad-comp-way", o.grad_comp.selective_way,
                 "SC: compress DP gradients only on pipeline stages s < K (default: all)");
  app.add_flag("--check-lep", o.check_lep,
               "record, per iteration on the last stage, the LEP error vs the activation change (cosine, means) "
               "and LEP's premises (error_ratio, delta_ratio) in the metrics' lep_check");
  add_diloco_flags(app, o);
}

void add_tokenizer_flags(CLI::App& app, TokenizerSpec& spec) {
  app.add_option_function<std::string>(
         "--tokenizer-type", [&spec](const std::string& name) { spec.type = parse_tokenizer_type(name); },
         "SentencePieceTokenizer (default; --tokenizer-model) or GPT2BPETokenizer (--vocab-file, --merge-file)")
      ->default_str("SentencePieceTokenizer");
  app.add_option("--tokenizer-model", spec.model, "SentencePiece model (from preprocess)");
  app.add_option("--vocab-file", spec.vocab_file, "GPT-2 BPE vocabulary: encoder.json / vocab.json");
  app.add_option("--merge-file", spec.merge_file, "GPT-2 BPE merges: vocab.bpe / merges.txt");
}

void add_train_command_flags(CLI::App& app, TrainOptions& o) {
  add_train_flags(app, o);
  app.add_option("--vocab-size", o.model.vocab_size, "vocabulary size when no --tokenizer-model is given");
}

void refuse_inapplicable_flags(const CLI::App& app, const TrainOptions& o) {
  refuse_inapplicable_model_flags(app, o.model);
  refuse_inapplicable_diloco_flags(app, o);
  auto given = [&app](const char* flag) { return app.count(flag) > 0; };
  auto refuse = [](const char* flag, const std::string& why, const std::string& fix) {
    throw UsageError(fmt::format("{} {}; drop it or {}", flag, why, fix));
  };
  struct Link {
    const char* enable;  // the flag that turns the link's compression on (null: the method flag does)
    bool enabled;
    const char* method_flag;
    CompressionMethod method;
    const char* topk_flag;
    const char* rank_flag;  // PowerSGD's rank (null: none on this link)
    const char* rounding_flag;
    const char* lossless_flag;  // (null: none on this link)
    const char* rotation_flag;
    const char* density_flag;  // topk2's (null: none on this link)
    const char* high_fraction_flag;
  };
  const Link links[] = {
      {"--inter-grad-comp", o.cb.enabled, "--inter-grad-comp-method", o.cb.method, "--inter-grad-comp-topk-fraction",
       "--inter-grad-comp-rank", "--inter-grad-comp-rounding", "--inter-grad-comp-lossless", "--inter-grad-comp-rotation",
       nullptr, "--inter-grad-comp-adaptive-high-fraction"},
      {"--grad-comp", o.grad_comp.enabled, "--grad-comp-method", o.grad_comp.method, "--grad-comp-topk-fraction",
       "--grad-comp-rank", "--grad-comp-rounding", nullptr, "--grad-comp-rotation", "--grad-comp-topk-density",
       "--grad-comp-adaptive-high-fraction"},
      {nullptr, o.activation_comp.enabled, "--activation-comp-method", o.activation_comp.method,
       "--activation-comp-topk-fraction", nullptr, "--activation-comp-rounding", "--activation-comp-lossless",
       "--activation-comp-rotation", nullptr, "--activation-comp-adaptive-high-fraction"},
  };
  if (given("--train-samples") && given("--train-iters"))
    refuse("--train-samples", "excludes --train-iters (Megatron's rule: a run counts iterations or samples)",
           "drop --train-iters");
  // Megatron's data forms exclude each other: one blend divided by --split, or the sets' own.
  if (!o.train_data_path.empty() || !o.valid_data_path.empty() || !o.test_data_path.empty()) {
    const char* set_flag = !o.train_data_path.empty()   ? "--train-data-path"
                           : !o.valid_data_path.empty() ? "--valid-data-path"
                                                        : "--test-data-path";
    if (given("--data-path"))
      refuse("--data-path", fmt::format("excludes {} (Megatron's rule: one blend divided by --split, or the "
                                        "train / valid / test sets given apart)", set_flag),
             "give the sets with --train-data-path, --valid-data-path and --test-data-path only");
    if (given("--split"))
      refuse("--split", fmt::format("divides --data-path's datasets, but {} gives the sets apart", set_flag),
             "use --data-path instead");
    if (o.train_data_path.empty())
      throw UsageError(fmt::format("{} needs --train-data-path (the training set); add it, or use --data-path with "
                                   "--split", set_flag));
  }
  // Zero where zero is the default (off, or dynamic) would be taken silently: the
  // default is spelled by leaving the flag out.
  if (given("--num-layers-per-virtual-pipeline-stage") && o.layers_per_virtual_stage <= 0)
    throw UsageError(fmt::format("--num-layers-per-virtual-pipeline-stage must be >= 1 (got {}); leave it out for "
                                 "the plain (not interleaved) schedule",
                                 o.layers_per_virtual_stage));
  if (given("--loss-scale") && !(o.loss_scale.loss_scale > 0))
    throw UsageError(fmt::format("--loss-scale must be > 0 (got {}); leave it out for dynamic loss scaling",
                                 o.loss_scale.loss_scale));
  for (const char* f : {"--tensorboard-log-interval", "--log-timers-to-tensorboard", "--log-validation-ppl-to-tensorboard"})
    if (given(f) && o.tensorboard.dir.empty()) refuse(f, "has no effect without --tensorboard-dir", "add --tensorboard-dir DIR");
  for (const Link& l : links) {
    const char* needs = l.enable ? l.enable : l.method_flag;
    if (!l.enabled) {
      // (A method other than the default without its switch is TrainOptions::validate's error.)
      for (const char* f : {l.topk_flag, l.rank_flag, l.rounding_flag, l.lossless_flag, l.rotation_flag,
                            l.density_flag, l.high_fraction_flag})
        if (f && given(f))
          refuse(f, fmt::format("has no effect without {}{}", needs, l.enable ? "" : " other than none"),
                 fmt::format("add {}", needs));
      continue;
    }
    if (given(l.topk_flag) && l.method != CompressionMethod::Topk)
      refuse(l.topk_flag, fmt::format("applies only to {} topk (it is {})", l.method_flag, method_name(l.method)),
             fmt::format("use {} topk", l.method_flag));
    if (l.density_flag && given(l.density_flag) && l.method != CompressionMethod::Topk2)
      refuse(l.density_flag, fmt::format("applies only to {} topk2 (it is {})", l.method_flag, method_name(l.method)),
             fmt::format("use {} topk2", l.method_flag));
    if (given(l.high_fraction_flag) && !method_is_adaptive(l.method))
      refuse(l.high_fraction_flag,
             fmt::format("applies only to {} adaptive (it is {})", l.method_flag, method_name(l.method)),
             fmt::format("use {} adaptive", l.method_flag));
    if (l.lossless_flag && given(l.lossless_flag) && !method_takes_block_options(l.method))
      refuse(l.lossless_flag,
             fmt::format("codes the block methods' wires, {} (it is {})", block_option_method_names(), method_name(l.method)),
             fmt::format("use {} with one of them", l.method_flag));
    if (given(l.rounding_flag) && !method_takes_block_options(l.method))
      refuse(l.rounding_flag,
             fmt::format("applies only to the block methods {} (it is {})", block_option_method_names(), method_name(l.method)),
             fmt::format("use {} with one of them", l.method_flag));
    if (given(l.rotation_flag) && !method_takes_block_options(l.method))
      refuse(l.rotation_flag,
             fmt::format("rotates before a block method, {} (it is {})", block_option_method_names(), method_name(l.method)),
             fmt::format("use {} with one of them", l.method_flag));
    if (l.rank_flag && given(l.rank_flag) && l.method != CompressionMethod::PowerSgd)
      refuse(l.rank_flag, fmt::format("applies only to {} powersgd (it is {})", l.method_flag, method_name(l.method)),
             fmt::format("use {} powersgd", l.method_flag));
  }
}

}  // namespace occ::cmd
