// Test support: runs a few training steps on random tokens and dumps weights,
// logits, gradients and losses as safetensors for tests/reference/check_against_torch.py.
#include <cmath>

#include "apps/commands/commands.h"
#include "apps/commands/train_flags.h"
#include "core/rng.h"
#include "core/safetensors.h"
#include "model/gpt.h"
#include "train/checkpoint_merge.h"
#include "train/output_paths.h"

namespace occ::cmd {

int reference_dump(int argc, char** argv) {
  CLI::App app{"Dump a model's weights, logits, gradients and training losses for the PyTorch check",
               "reference-dump"};
  TrainOptions opt;
  opt.model.hidden_dropout = opt.model.attention_dropout = 0.0f;
  opt.lr_warmup_iters = 0;
  add_model_flags(app, opt.model);
  add_optimizer_flags(app, opt);
  std::string out;
  int steps = 5;
  std::string load;
  auto* vocab = app.add_option("--vocab-size", opt.model.vocab_size, "tokenizer vocabulary (padded by the model)");
  app.add_option("--load", load,
                 "start from this checkpoint (any layout; its model replaces the model flags) instead of the init");
  app.add_option("--micro-batch-size", opt.micro_batch_size)->capture_default_str();
  app.add_option("--steps", steps, "training steps")->capture_default_str();
  app.add_option("--out", out, "output .safetensors file")->required();
  app.add_option("--device", opt.device_name, "cpu | cuda (default: cuda when available)");
  app.add_option("--recompute-granularity", opt.recompute_granularity, "selective | full (recompute in backward)");
  if (int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;
  {  // where it writes: not over the checkpoint it reads, nor a --config file
    OutputPaths outputs;
    outputs.file("--out", out);
    if (!load.empty()) outputs.checkpoint_input("--load", load);
    outputs.check();
  }
  refuse_inapplicable_model_flags(app, opt.model);
  std::unique_ptr<MergedCheckpoint> merged;
  if (!load.empty()) {
    merged = std::make_unique<MergedCheckpoint>(merge_checkpoint(load));
    opt.model = merged->model;
    opt.model.hidden_dropout = opt.model.attention_dropout = 0.0f;
  } else {
    OCC_CHECK(vocab->count() > 0, "reference-dump needs --vocab-size (or --load CHECKPOINT)");
  }
  opt.resolve_device();
  opt.train_iters = steps;
  opt.global_batch_size = opt.micro_batch_size;
  ParallelLayout layout;
  opt.validate(layout);
  require_device(opt.device);

  const GptConfig& m = opt.model;
  const int B = opt.micro_batch_size, T = m.seq_length, V = m.padded_vocab_size();
  SelfCommunicator self;
  GptStage stage(m, layout, self, opt.seed, StageOptions{opt.device, opt.recompute()});
  AdamW adam(stage.param_layout(), opt.adam, stage.ops());
  const LrSchedule schedule = opt.lr_schedule();
  if (merged)
    for (const auto& t : stage.param_layout().tensors()) {
      const MergedTensor& mt = merged->tensors.at(t.name);
      stage.params().copy_from_host(mt.data.data(), mt.data.size(), size_t(t.offset));
    }
  std::printf("reference-dump: device %s\n", describe_device(opt.device).c_str());

  SafetensorsWriter w;
  const std::vector<float> init = stage.params().to_host();
  for (const auto& t : stage.param_layout().tensors()) w.add_f32(t.name, init.data() + t.offset, t.shape);

  std::vector<float> losses;
  std::vector<int32_t> batch(size_t(B) * (T + 1)), inputs(size_t(B) * T), labels(size_t(B) * T);
  StageActivations acts = stage.make_activations();
  for (int step = 0; step < steps; ++step) {
    const uint64_t key = make_key(opt.seed, 0xBA7C4ull, uint64_t(step));
    for (size_t i = 0; i < batch.size(); ++i)
      batch[i] = int32_t(Philox::block(key, 0, i)[0] % uint32_t(m.vocab_size));
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t) {
        inputs[size_t(b) * T + t] = batch[size_t(b) * (T + 1) + t];
        labels[size_t(b) * T + t] = batch[size_t(b) * (T + 1) + t + 1];
      }
    w.add_i32("batch." + std::to_string(step), batch.data(), {B, T + 1});
    MicroBatch mb{inputs.data(), labels.data(), B, T, 0, step, 1.0f / float(B * T)};
    if (step == 0) {
      MicroBatch eval = mb;
      eval.keep_logits = true;
      stage.forward(acts, eval, nullptr, nullptr, false);
      w.add_f32("logits", stage.logits_to_host(acts).data(), {B, T, V});
      const float l = float(stage.take_loss_sum() / double(B * T));
      w.add_f32("loss", &l, {1});
    }
    stage.zero_grads();
    stage.forward(acts, mb, nullptr, nullptr, true);
    losses.push_back(float(stage.take_loss_sum() / double(B * T)));
    stage.backward(acts, mb, nullptr, nullptr);
    if (step == 0) {
      const std::vector<float> grads = stage.grads().to_host();
      for (const auto& t : stage.param_layout().tensors()) w.add_f32("grad." + t.name, grads.data() + t.offset, t.shape);
    }
    const double norm = std::sqrt(local_grad_sq_norm(stage.ops(), stage.param_layout(), stage.grads().data()));
    clip_grads(stage.ops(), stage.grads().data(), int64_t(stage.grads().size()), norm, opt.clip_grad);
    adam.update(stage.params().data(), stage.grads().data(), schedule.at(step + 1), step + 1);
  }
  w.add_f32("losses", losses.data(), {steps});

  auto meta = [&](const char* k, auto v) { w.set_metadata(k, fmt::format("{}", v)); };
  meta("num_layers", m.num_layers);
  meta("hidden_size", m.hidden_size);
  meta("num_attention_heads", m.num_attention_heads);
  meta("seq_length", m.seq_length);
  meta("max_position_embeddings", m.max_position_embeddings);
  meta("padded_vocab_size", V);
  meta("micro_batch_size", B);
  meta("steps", steps);
  meta("lr", opt.lr);
  meta("min_lr", opt.min_lr);
  meta("lr_warmup_iters", schedule.warmup_steps);  // reference-dump counts in iterations
  meta("lr_decay_style", opt.lr_decay_style);
  meta("weight_decay", opt.adam.weight_decay);
  meta("adam_beta1", opt.adam.beta1);
  meta("adam_beta2", opt.adam.beta2);
  meta("adam_eps", opt.adam.eps);
  meta("clip_grad", opt.clip_grad);
  meta("norm_epsilon", m.norm_epsilon);
  // The architecture (tests/reference/check_against_torch.py builds the same model).
  meta("normalization", normalization_name(m.normalization));
  meta("swiglu", m.swiglu ? 1 : 0);
  meta("ffn_hidden_size", m.ffn_hidden_size());
  meta("position_embedding_type", position_embedding_name(m.position_embedding));
  meta("rotary_base", m.rotary_base);
  meta("rotary_percent", m.rotary_percent);
  meta("num_query_groups", m.kv_heads());
  meta("untie_embeddings_and_output_weights", m.untie_embeddings_and_output_weights ? 1 : 0);
  meta("add_bias_linear", m.add_bias_linear ? 1 : 0);
  w.write(out);
  return 0;
}

}  // namespace occ::cmd
