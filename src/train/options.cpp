#include "train/options.h"

#include "comm/comm_backend.h"

#include <cmath>

namespace occ {

nlohmann::json architecture_json(const GptConfig& m) {
  return {{"normalization", normalization_name(m.normalization)},
          {"norm_epsilon", m.norm_epsilon},
          {"swiglu", m.swiglu},
          {"ffn_hidden_size", m.ffn_hidden_size()},
          {"position_embedding_type", position_embedding_name(m.position_embedding)},
          {"rotary_base", m.rotary_base},
          {"rotary_percent", m.rotary_percent},
          {"num_query_groups", m.kv_heads()},
          {"untie_embeddings_and_output_weights", m.untie_embeddings_and_output_weights},
          {"add_bias_linear", m.add_bias_linear}};
}

void architecture_from_json(const nlohmann::json& c, GptConfig& m, const std::string& path) {
  auto field = [&](const char* key) -> const nlohmann::json* {
    return c.is_object() && c.contains(key) ? &c[key] : nullptr;
  };
  const GptConfig gpt2;
  m.normalization = gpt2.normalization, m.norm_epsilon = gpt2.norm_epsilon, m.swiglu = gpt2.swiglu;
  m.ffn_hidden = gpt2.ffn_hidden, m.position_embedding = gpt2.position_embedding, m.rotary_base = gpt2.rotary_base;
  m.rotary_percent = gpt2.rotary_percent, m.group_query_attention = gpt2.group_query_attention;
  m.num_query_groups = gpt2.num_query_groups;
  m.untie_embeddings_and_output_weights = gpt2.untie_embeddings_and_output_weights;
  m.add_bias_linear = gpt2.add_bias_linear;
  try {
    if (auto* v = field("normalization")) m.normalization = parse_normalization(v->get<std::string>());
    if (auto* v = field("norm_epsilon")) m.norm_epsilon = v->get<float>();
    if (auto* v = field("swiglu")) m.swiglu = v->get<bool>();
    if (auto* v = field("position_embedding_type"))
      m.position_embedding = parse_position_embedding(v->get<std::string>());
    if (auto* v = field("rotary_base")) m.rotary_base = v->get<float>();
    if (auto* v = field("rotary_percent")) m.rotary_percent = v->get<float>();
    if (auto* v = field("untie_embeddings_and_output_weights")) m.untie_embeddings_and_output_weights = v->get<bool>();
    if (auto* v = field("add_bias_linear")) m.add_bias_linear = v->get<bool>();
    if (auto* v = field("ffn_hidden_size")) m.ffn_hidden = v->get<int>();
    if (auto* v = field("num_query_groups")) {
      const int groups = v->get<int>();
      m.group_query_attention = groups != m.num_attention_heads;
      m.num_query_groups = groups;
    }
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint {} has a malformed architecture field ({}); it was not written by optimus-cc train", path,
         e.what());
  }
}

LrSchedule TrainOptions::lr_schedule() const {
  LrSchedule s;
  s.max_lr = lr;
  s.min_lr = min_lr;
  s.style = lr_decay_style;
  if (train_samples > 0) {  // counted in samples, as Megatron's sample-based schedule
    s.steps_per_iteration = global_batch_size;
    s.warmup_steps = lr_warmup_samples >= 0 ? lr_warmup_samples
                                            : int64_t(std::llround(lr_warmup_fraction * double(train_samples)));
    s.decay_steps = lr_decay_samples > 0 ? lr_decay_samples : train_samples;
  } else {
    s.warmup_steps = lr_warmup_iters >= 0 ? lr_warmup_iters : int64_t(std::llround(lr_warmup_fraction * double(train_iters)));
    s.decay_steps = lr_decay_iters > 0 ? lr_decay_iters : train_iters;
  }
  if (s.decay_steps <= s.warmup_steps) s.decay_steps = s.warmup_steps + 1;
  return s;
}

void TrainOptions::resolve_train_samples() {
  if (train_samples <= 0) return;
  OCC_CHECK(global_batch_size >= 1 && train_samples >= global_batch_size,
            "--train-samples {} is less than one global batch of {}; train at least one iteration", train_samples,
            global_batch_size);
  train_iters = train_samples / global_batch_size;  // Megatron's update_train_iters, without ramp-up
}

int64_t TrainOptions::valid_samples() const {
  const int64_t evaluations = eval_interval > 0 && !eval_fixed_set ? train_iters / eval_interval + 1 : 1;
  return evaluations * eval_iters * global_batch_size;
}

TokenizerSpec tokenizer_from_config(const nlohmann::json& c) {
  auto text = [&c](const char* key) {
    return c.is_object() && c.contains(key) && c[key].is_string() ? c[key].get<std::string>() : std::string();
  };
  TokenizerSpec spec;
  if (!text("tokenizer_type").empty()) spec.type = parse_tokenizer_type(text("tokenizer_type"));
  spec.model = text("tokenizer_model"), spec.vocab_file = text("vocab_file"), spec.merge_file = text("merge_file");
  return spec;
}

namespace {
std::string joined(const std::vector<std::string>& words) {
  std::string s;
  for (const auto& w : words) s += (s.empty() ? "" : " ") + w;
  return s;
}
}  // namespace

DataSpec TrainOptions::data_spec() const {
  DataSpec spec;
  spec.data = parse_data_blend(data_path, "--data-path");
  spec.train = parse_data_blend(train_data_path, "--train-data-path");
  spec.valid = parse_data_blend(valid_data_path, "--valid-data-path");
  spec.test = parse_data_blend(test_data_path, "--test-data-path");
  spec.split = split;
  spec.seq_length = model.seq_length;
  spec.seed = seed;
  spec.vocab_size = model.vocab_size;
  spec.train_samples = train_samples > 0 ? train_samples : train_iters * global_batch_size;
  spec.valid_samples = valid_samples();
  spec.test_samples = test_samples();
  spec.cache_path = data_cache_path;
  spec.global_batch_size = global_batch_size;
  spec.eval_iters = eval_iters;
  spec.train_in_samples = train_samples > 0;
  return spec;
}

void TrainOptions::validate(const ParallelLayout& layout) const {
  OCC_CHECK(micro_batch_size >= 1, "--micro-batch-size must be >= 1 (got {})", micro_batch_size);
  OCC_CHECK(global_batch_size >= 1, "--global-batch-size must be >= 1 (got {})", global_batch_size);
  OCC_CHECK(global_batch_size % (micro_batch_size * layout.dp_size) == 0,
            "--global-batch-size {} is not divisible by --micro-batch-size {} x data-parallel size {}; use a multiple "
            "of {}",
            global_batch_size, micro_batch_size, layout.dp_size, micro_batch_size * layout.dp_size);
  if (layers_per_virtual_stage != 0) validate_interleaving(layout);
  OCC_CHECK(layout.vp_size == model_chunks(), "internal: layout has {} model chunks, the options {}", layout.vp_size,
            model_chunks());
  model.validate(layout);
  tokenizer.validate();
  OCC_CHECK(train_iters >= 1, "--train-iters must be >= 1 (got {})", train_iters);
  OCC_CHECK(eval_interval >= 0 && eval_iters >= 0, "--eval-interval and --eval-iters must be >= 0");
  // Counts the sample index must hold (no product may overflow on the way).
  const int64_t max_samples = max_samples_per_set(model.seq_length);
  OCC_CHECK(train_samples <= max_samples,
            "--train-samples {} is more training samples than the sample index holds ({} at --seq-length {}); the "
            "largest accepted --train-samples is {}",
            train_samples, max_samples, model.seq_length, max_samples);
  OCC_CHECK(train_iters <= max_samples / global_batch_size,
            "--train-iters {} x --global-batch-size {} is more training samples than the sample index holds ({} at "
            "--seq-length {}); the largest accepted --train-iters is {}",
            train_iters, global_batch_size, max_samples, model.seq_length, max_samples / global_batch_size);
  OCC_CHECK(eval_iters <= max_samples / global_batch_size,
            "--eval-iters {} x --global-batch-size {} is more evaluation samples than the sample index holds ({} at "
            "--seq-length {}); the largest accepted --eval-iters is {}",
            eval_iters, global_batch_size, max_samples, model.seq_length, max_samples / global_batch_size);
  // Megatron's validation samples: one batch of --eval-iters per evaluation the run makes
  // (with --eval-fixed-set, one batch read again at every evaluation).
  const int64_t evaluations = eval_interval > 0 && !eval_fixed_set ? train_iters / eval_interval + 1 : 1;
  OCC_CHECK(eval_iters <= max_samples / global_batch_size / evaluations,
            "--eval-iters {} x --global-batch-size {} x {} evaluations is more validation samples than the sample "
            "index holds ({} at --seq-length {}); the largest accepted --eval-iters here is {}",
            eval_iters, global_batch_size, evaluations, max_samples, model.seq_length,
            max_samples / global_batch_size / evaluations);
  // Every floating-point setting finite and in its range (NaN fails every comparison).
  auto finite_at_least = [](double v, double low) { return std::isfinite(v) && v >= low; };
  OCC_CHECK(finite_at_least(lr, 0), "--lr must be a finite number >= 0 (got {})", lr);
  OCC_CHECK(finite_at_least(min_lr, 0), "--min-lr must be a finite number >= 0 (got {})", min_lr);
  OCC_CHECK(lr_warmup_fraction >= 0 && lr_warmup_fraction <= 1, "--lr-warmup-fraction must be in [0, 1] (got {})",
            lr_warmup_fraction);
  OCC_CHECK(lr_warmup_iters >= -1,
            "--lr-warmup-iters must be >= 0 (got {}); leave it out to use --lr-warmup-fraction", lr_warmup_iters);
  OCC_CHECK(lr_decay_iters == -1 || lr_decay_iters >= 1,
            "--lr-decay-iters must be >= 1 (got {}); leave it out to decay over --train-iters", lr_decay_iters);
  OCC_CHECK(lr_warmup_samples >= -1,
            "--lr-warmup-samples must be >= 0 (got {}); leave it out to use --lr-warmup-fraction", lr_warmup_samples);
  OCC_CHECK(lr_decay_samples == -1 || lr_decay_samples >= 1,
            "--lr-decay-samples must be >= 1 (got {}); leave it out to decay over --train-samples", lr_decay_samples);
  // Megatron's rule: a run counts in iterations or in samples, its schedule too.
  OCC_CHECK(train_samples > 0 || (lr_warmup_samples < 0 && lr_decay_samples < 0),
            "--lr-warmup-samples and --lr-decay-samples go with --train-samples (a sample-based run); with "
            "--train-iters use --lr-warmup-iters and --lr-decay-iters");
  OCC_CHECK(train_samples <= 0 || (lr_warmup_iters < 0 && lr_decay_iters < 0),
            "--lr-warmup-iters and --lr-decay-iters go with --train-iters; with --train-samples use "
            "--lr-warmup-samples and --lr-decay-samples");
  OCC_CHECK(finite_at_least(adam.weight_decay, 0), "--weight-decay must be a finite number >= 0 (got {})",
            adam.weight_decay);
  OCC_CHECK(finite_at_least(clip_grad, 0), "--clip-grad must be a finite number >= 0 (0 disables clipping; got {})",
            clip_grad);
  OCC_CHECK(adam.beta1 >= 0 && adam.beta1 < 1 && adam.beta2 >= 0 && adam.beta2 < 1,
            "--adam-beta1/--adam-beta2 must be in [0, 1)");
  OCC_CHECK(std::isfinite(adam.eps) && adam.eps > 0, "--adam-eps must be a finite number > 0 (got {})", adam.eps);
  OCC_CHECK(std::isfinite(model.init_method_std) && model.init_method_std > 0,
            "--init-method-std must be a finite number > 0 (got {})", model.init_method_std);
  OCC_CHECK(std::isfinite(exit.duration_mins), "--exit-duration-in-mins must be a finite number (got {})",
            exit.duration_mins);
  OCC_CHECK(log_interval >= 1, "--log-interval must be >= 1");
  OCC_CHECK(tensorboard.log_interval >= 1, "--tensorboard-log-interval must be >= 1 (got {})", tensorboard.log_interval);
  OCC_CHECK(save_interval >= 0, "--save-interval must be >= 0");
  OCC_CHECK(save_interval == 0 || !save.empty(), "--save-interval needs --save DIR");
  OCC_CHECK(!async_save || !save.empty(), "--async-save needs --save DIR");
  OCC_CHECK(keep_last >= 0, "--keep-last must be >= 0 (0 keeps every checkpoint; got {})", keep_last);
  OCC_CHECK(keep_last == 0 || !save.empty(), "--keep-last needs --save DIR");
  OCC_CHECK(ckpt_step >= -1, "--ckpt-step must be a saved iteration (>= 0; got {})", ckpt_step);
  OCC_CHECK(ckpt_step < 0 || !load.empty(), "--ckpt-step needs --load DIR (the checkpoint directory it picks from)");
  OCC_CHECK(debug_save_delay_s >= 0, "--debug-save-delay must be >= 0 seconds");
  OCC_CHECK(dp_bucket_elems >= 1, "--dp-bucket-size must be >= 1");
  OCC_CHECK(!overlap_param_gather || use_distributed_optimizer,
            "--overlap-param-gather overlaps the distributed optimizer's parameter all-gather with the next forward; "
            "add --use-distributed-optimizer, or drop it");
  OCC_CHECK(!sequence_parallel || layout.tp_size > 1,
            "--sequence-parallel splits the tokens over the tensor-parallel ranks and there is only one; drop it or "
            "set --tensor-model-parallel-size 2 or more");
  OCC_CHECK(!sequence_parallel || (int64_t(micro_batch_size) * model.seq_length) % layout.tp_size == 0,
            "--sequence-parallel splits a micro-batch's {} tokens (--micro-batch-size x --seq-length) over the {} "
            "tensor-parallel ranks, which does not divide them; use a multiple of {} tokens",
            int64_t(micro_batch_size) * model.seq_length, layout.tp_size, layout.tp_size);
  choose_comm_backend(parse_comm_backend(comm_backend_name), device, 1, 1, 1);  // throws on a bad name, nccl on the CPU
  OCC_CHECK(std::isfinite(comm_timeout_s) && comm_timeout_s > 0, "--comm-timeout must be a finite number of seconds > 0 (got {})",
            comm_timeout_s);
  OCC_CHECK(cb.rank >= 1, "--inter-grad-comp-rank must be >= 1 (got {})", cb.rank);
  OCC_CHECK(grad_comp.rank >= 1, "--grad-comp-rank must be >= 1 (got {})", grad_comp.rank);
  OCC_CHECK(grad_comp.warmup_fraction >= 0 && grad_comp.warmup_fraction <= 1,
            "--grad-comp-warm-up must be a fraction in [0, 1] (got {})", grad_comp.warmup_fraction);
  OCC_CHECK(grad_comp.selective_way == -1 || (grad_comp.selective_way >= 1 && grad_comp.selective_way <= layout.pp_size),
            "--selective-grad-comp-way must be between 1 and the pipeline size {} (got {})", layout.pp_size,
            grad_comp.selective_way);
  OCC_CHECK(grad_comp.selective_way == -1 || grad_comp.enabled, "--selective-grad-comp-way needs --grad-comp");
  OCC_CHECK(!cb.epilogue_only || cb.enabled, "--inter-grad-comp-epilogue-only needs --inter-grad-comp");
  OCC_CHECK(cb.lep_decay > 0.0f && cb.lep_decay <= 1.0f,
            "--inter-grad-comp-lep-decay must be in (0, 1] (got {}); 1 is the paper's LEP", cb.lep_decay);
  OCC_CHECK(cb.lep_decay == 1.0f || (cb.enabled && cb.lazy_error),
            "--inter-grad-comp-lep-decay has no effect without LEP; add --inter-grad-comp and --use-error-feedback");
  OCC_CHECK(cb.method == CompressionMethod::PowerSgd || cb.enabled,
            "--inter-grad-comp-method {} needs --inter-grad-comp (CB) to be on", method_name(cb.method));
  OCC_CHECK(!grad_comp.error_feedback || grad_comp.enabled, "--grad-comp-error-feedback needs --grad-comp");
  OCC_CHECK(grad_comp.method == CompressionMethod::PowerSgd || grad_comp.enabled,
            "--grad-comp-method {} needs --grad-comp to be on", method_name(grad_comp.method));
  auto fraction_ok = [](double f) { return f > 0.0 && f <= 1.0; };
  OCC_CHECK(skip_nonfinite >= 0, "--skip-nonfinite must be >= 0 (got {})", skip_nonfinite);
  OCC_CHECK(exit.interval >= 0, "--exit-interval must be >= 0 (got {})", exit.interval);
  OCC_CHECK(exit.duration_mins >= 0, "--exit-duration-in-mins must be >= 0 (got {})", exit.duration_mins);
  OCC_CHECK(fraction_ok(cb.topk_fraction), "--inter-grad-comp-topk-fraction must be in (0, 1] (got {})",
            cb.topk_fraction);
  OCC_CHECK(fraction_ok(grad_comp.topk_fraction), "--grad-comp-topk-fraction must be in (0, 1] (got {})",
            grad_comp.topk_fraction);
  OCC_CHECK(grad_comp.topk_density > 0.0 && grad_comp.topk_density <= 0.25,
            "--grad-comp-topk-density must be in (0, 0.25] (got {}); e.g. 0.02 sends 2 % of the values",
            grad_comp.topk_density);
  OCC_CHECK(fraction_ok(activation_comp.topk_fraction), "--activation-comp-topk-fraction must be in (0, 1] (got {})",
            activation_comp.topk_fraction);
  OCC_CHECK(!activation_comp.enabled || layout.pp_size > 1,
            "--activation-comp-method {} needs --pipeline-model-parallel-size >= 2 (it compresses the activations "
            "sent between stages)",
            method_name(activation_comp.method));
  OCC_CHECK(!check_lep || (cb.enabled && cb.lazy_error), "--check-lep needs --inter-grad-comp and --use-error-feedback");
  OCC_CHECK(!emb_comm_opt || model.tied_embeddings(),
            "--emb-comm-opt (FE) fuses the synchronisation of the tied word embedding's two copies; with "
            "--untie-embeddings-and-output-weights there is none: drop one of them");
  OCC_CHECK(recompute_granularity.empty() || recompute_granularity == "selective" || recompute_granularity == "full",
            "--recompute-granularity {} is not known; use selective (attention only) or full (whole layers)",
            recompute_granularity);
  OCC_CHECK(!(bf16 && fp16), "--bf16 and --fp16 exclude each other; pick one");
  OCC_CHECK(!grad_reduce_in_bf16 || precision() != Precision::Fp32,
            "--grad-reduce-in-bf16 reduces the gradients of a --bf16 or --fp16 run in bf16; an fp32 run reduces them "
            "in fp32: add --bf16 (or --fp16), or drop it");
  OCC_CHECK(!tp_reduce_in_fp32 || precision() != Precision::Fp32,
            "--tp-reduce-in-fp32 keeps a --bf16 or --fp16 run's tensor-parallel sums in fp32; an fp32 run's already "
            "are: add --bf16 (or --fp16), or drop it");
  validate_attention_backend();
  // A skipped (overflowing) fp16 iteration has already fed inf to the compressors'
  // state: PowerSGD's warm start and the LEP / error-feedback residuals would stay
  // non-finite for the rest of the run.
  OCC_CHECK(!fp16 || !stateful_compression(),
            "--fp16 cannot be combined with --inter-grad-comp or --grad-comp when they keep state (PowerSGD, LEP, "
            "error feedback): an overflowing iteration would leave inf in the compressors' warm start and error "
            "state; use --bf16 (no loss scaling) with compression, or a stateless method without error feedback");
  // The same for a skipped non-finite iteration.
  OCC_CHECK(skip_nonfinite == 0 || !stateful_compression(),
            "--skip-nonfinite cannot be combined with compression that keeps state (PowerSGD, LEP, error "
            "feedback): a skipped iteration would leave its non-finite values in that state for the rest of the "
            "run; drop --skip-nonfinite (the run then stops at the first one) or use a stateless method");
  diloco.validate(model.num_layers, grad_comp.enabled, emb_comm_opt, use_distributed_optimizer);
  loss_scale.validate();
  lr_schedule().validate();
}

// Megatron's conditions for its interleaved schedule (and its micro-batch rule).
void TrainOptions::validate_interleaving(const ParallelLayout& layout) const {
  const int N = layers_per_virtual_stage, P = layout.pp_size, L = model.num_layers;
  OCC_CHECK(N >= 1, "--num-layers-per-virtual-pipeline-stage must be >= 1 (got {})", N);
  OCC_CHECK(P >= 2,
            "--num-layers-per-virtual-pipeline-stage interleaves model chunks over pipeline stages and needs "
            "--pipeline-model-parallel-size >= 2; drop it for a single stage");
  OCC_CHECK(L % P == 0 && (L / P) % N == 0,
            "--num-layers-per-virtual-pipeline-stage {} does not divide the {} layers of each of the {} pipeline "
            "stages (--num-layers {}); use a divisor of {}",
            N, L / P, P, L, L / P);
  OCC_CHECK(L / P / N >= 2,
            "--num-layers-per-virtual-pipeline-stage {} puts all {} layers of a stage in one model chunk, which is "
            "the plain schedule; drop the flag, or give fewer layers per chunk (a divisor of {} below it)",
            N, L / P, L / P);
  const int64_t M = num_micro_batches(layout.dp_size);
  OCC_CHECK(M % P == 0,
            "number of micro-batches {} (--global-batch-size / (--micro-batch-size x data-parallel size)) is not "
            "divisible by --pipeline-model-parallel-size {}, as the interleaved schedule needs; use a global batch "
            "of a multiple of {} micro-batches",
            M, P, P);
}

void TrainOptions::validate_attention_backend() const {
  const std::string& a = attention_backend;
  OCC_CHECK(a == "auto" || a == "flash" || a == "fused" || a == "gemm",
            "--attention-backend {} is not known; use auto, flash (tensor cores, with --bf16 or --fp16), fused or "
            "gemm (the fp32 kernels)",
            a);
  OCC_CHECK(a == "auto" || device == Device::Cuda,
            "--attention-backend {} chooses among the GPU's attention kernels; the CPU has one, so drop it with "
            "--device cpu",
            a);
  OCC_CHECK(a != "flash" || precision() != Precision::Fp32,
            "--attention-backend flash runs on 16-bit q, k and v; add --bf16 or --fp16, or use fused for fp32");
  OCC_CHECK(a != "flash" || model.head_dim() == 64 || model.head_dim() == 128,
            "--attention-backend flash supports head dimensions 64 and 128, not {} (--hidden-size / "
            "--num-attention-heads); use auto, which runs the fused fp32 kernels for other sizes",
            model.head_dim());
}

void TrainOptions::resolve_device() { device = device_name.empty() ? default_device() : parse_device(device_name); }

Recompute TrainOptions::recompute() const {
  if (!recompute_granularity.empty()) return parse_recompute(recompute_granularity);
  return recompute_activations ? Recompute::Selective : Recompute::None;
}

nlohmann::json TrainOptions::math_json() const {
  nlohmann::json j = to_json();
  j["bf16"] = bf16;
  j["fp16"] = fp16;
  j["loss_scale"] = loss_scale.loss_scale;
  j["initial_loss_scale"] = loss_scale.initial_loss_scale;
  j["min_loss_scale"] = loss_scale.min_loss_scale;
  j["loss_scale_window"] = loss_scale.loss_scale_window;
  j["hysteresis"] = loss_scale.hysteresis;
  j["recompute_activations"] = recompute_activations;
  j["recompute_granularity"] = recompute_granularity;
  j["device"] = device_name;
  j["attention_backend"] = attention_backend;
  j["debug_classifier_values"] = debug_classifier_values;
  j["lr_warmup_iters"] = lr_warmup_iters;
  j["lr_decay_iters"] = lr_decay_iters;
  j["lr_warmup_samples"] = lr_warmup_samples;
  j["lr_decay_samples"] = lr_decay_samples;
  j["adam_beta1"] = adam.beta1;
  j["adam_beta2"] = adam.beta2;
  j["adam_eps"] = adam.eps;
  j["dp_bucket_elems"] = dp_bucket_elems;
  // Not the values (they are the blocking gather's), but the collectives every DP rank must run alike.
  j["overlap_param_gather"] = overlap_param_gather;
  j["sequence_parallel"] = sequence_parallel;
  j["skip_nonfinite"] = skip_nonfinite;
  // The wire's formats (core/wire_format.h): every rank must send and expect the same bytes.
  j["tp_reduce_in_fp32"] = tp_reduce_in_fp32;
  j["grad_reduce_in_bf16"] = grad_reduce_in_bf16;
  j["debug_fp32_wire"] = debug_fp32_wire;
  return j;
}

nlohmann::json TrainOptions::to_json() const {
  nlohmann::json j = {{"num_layers", model.num_layers},
          {"hidden_size", model.hidden_size},
          {"num_attention_heads", model.num_attention_heads},
          {"seq_length", model.seq_length},
          {"max_position_embeddings", model.max_position_embeddings},
          {"vocab_size", model.vocab_size},
          {"padded_vocab_size", model.padded_vocab_size()},
          {"hidden_dropout", model.hidden_dropout},
          {"attention_dropout", model.attention_dropout},
          {"tensor_model_parallel_size", tensor_parallel},
          {"pipeline_model_parallel_size", pipeline_parallel},
          {"num_layers_per_virtual_pipeline_stage", layers_per_virtual_stage},
          {"micro_batch_size", micro_batch_size},
          {"global_batch_size", global_batch_size},
          {"train_iters", train_iters},
          {"train_samples", train_samples},
          {"lr", lr},
          {"min_lr", min_lr},
          {"lr_decay_style", lr_decay_style},
          {"weight_decay", adam.weight_decay},
          {"clip_grad", clip_grad},
          {"seed", seed},
          {"data_path", joined(data_path)},
          {"tokenizer_type", tokenizer_type_name(tokenizer.type)},
          {"tokenizer_model", tokenizer.model},
          {"vocab_file", tokenizer.vocab_file},
          {"merge_file", tokenizer.merge_file},
          {"split", split},
          {"inter_grad_comp", cb.enabled},
          {"inter_grad_comp_rank", cb.rank},
          {"use_error_feedback", cb.lazy_error},
          {"inter_grad_comp_epilogue_only", cb.epilogue_only},
          {"inter_grad_comp_lep_decay", cb.lep_decay},
          {"inter_grad_comp_method", method_name(cb.method)},
          {"inter_grad_comp_topk_fraction", cb.topk_fraction},
          {"inter_grad_comp_rounding", cb.stochastic ? "stochastic" : "nearest"},
          {"inter_grad_comp_lossless", lossless_name(cb.lossless)},
          {"inter_grad_comp_rotation", rotation_name(cb.rotation)},
          {"inter_grad_comp_adaptive_high_fraction", cb.high_fraction},
          {"grad_comp_method", method_name(grad_comp.method)},
          {"grad_comp_topk_fraction", grad_comp.topk_fraction},
          {"grad_comp_topk_density", grad_comp.topk_density},
          {"grad_comp_rounding", grad_comp.stochastic ? "stochastic" : "nearest"},
          {"grad_comp_rotation", rotation_name(grad_comp.rotation)},
          {"grad_comp_adaptive_high_fraction", grad_comp.high_fraction},
          {"grad_comp_error_feedback", grad_comp.error_feedback},
          {"activation_comp_method", activation_comp.enabled ? method_name(activation_comp.method) : "none"},
          {"activation_comp_topk_fraction", activation_comp.topk_fraction},
          {"activation_comp_rounding", activation_comp.stochastic ? "stochastic" : "nearest"},
          {"activation_comp_lossless", lossless_name(activation_comp.lossless)},
          {"activation_comp_rotation", rotation_name(activation_comp.rotation)},
          {"activation_comp_adaptive_high_fraction", activation_comp.high_fraction},
          {"grad_comp", grad_comp.enabled},
          {"grad_comp_rank", grad_comp.rank},
          {"grad_comp_warm_up", grad_comp.warmup_fraction},
          {"selective_grad_comp_way", grad_comp.selective_way},
          {"emb_comm_opt", emb_comm_opt},
          {"use_distributed_optimizer", use_distributed_optimizer}};
  j.update(architecture_json(model));
  // The per-set data flags, where given (the checkpoint's "data" records their datasets).
  if (!train_data_path.empty()) j["train_data_path"] = joined(train_data_path);
  if (!valid_data_path.empty()) j["valid_data_path"] = joined(valid_data_path);
  if (!test_data_path.empty()) j["test_data_path"] = joined(test_data_path);
  if (diloco.enabled()) j["diloco"] = diloco.to_json();
  return j;
}

}  // namespace occ
