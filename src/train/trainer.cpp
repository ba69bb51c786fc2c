#include "train/trainer.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/tensor_file.h"
#include "core/timer.h"
#include "data/tokenizer.h"
#include "train/checkpoint.h"

namespace occ {

namespace {
std::string format_duration(double seconds) {
  int64_t s = int64_t(seconds + 0.5);
  return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
}
}  // namespace

Trainer::Trainer(TrainOptions options) : opt_(std::move(options)) {
  layout_ = ParallelLayout::from_rank(0, 1, opt_.tensor_parallel, opt_.pipeline_parallel);
  OCC_CHECK(!opt_.data_path.empty(), "--data-path is required (a dataset prefix written by 'optimus-cc preprocess')");
  if (!opt_.tokenizer_model.empty()) {
    opt_.model.vocab_size = Tokenizer::load(opt_.tokenizer_model).vocab_size();
  }
  OCC_CHECK(opt_.model.vocab_size > 0, "--tokenizer-model (or --vocab-size) is required to size the vocabulary");
  opt_.validate(layout_);

  dataset_ = std::make_unique<IndexedDataset>(IndexedDataset::open(opt_.data_path));
  auto splits = split_documents(dataset_->num_documents(), opt_.split);
  const int64_t gb = opt_.global_batch_size;
  train_data_ = std::make_unique<GptDataset>(*dataset_, splits[0], opt_.model.seq_length, opt_.train_iters * gb,
                                             opt_.seed, "train");
  if (opt_.eval_iters > 0 && splits[1].size() > 0)
    valid_data_ = std::make_unique<GptDataset>(*dataset_, splits[1], opt_.model.seq_length, opt_.eval_iters * gb,
                                               opt_.seed, "validation");

  stage_ = std::make_unique<GptStage>(opt_.model, layout_, self_, opt_.seed);
  optimizer_ = std::make_unique<AdamW>(stage_->param_layout(), opt_.adam);
  if (!opt_.load.empty()) load_checkpoint(opt_.load);
  if (!opt_.metrics_path.empty()) {
    metrics_ = std::fopen(opt_.metrics_path.c_str(), "a");
    OCC_CHECK(metrics_, "cannot open --metrics file {} for appending; check the path", opt_.metrics_path);
  }
  tty_ = isatty(STDOUT_FILENO);
}

Trainer::~Trainer() {
  if (metrics_) std::fclose(metrics_);
}

void Trainer::read_batch(const GptDataset& data, int64_t first_sample, int count) {
  const int T = opt_.model.seq_length, V = opt_.model.vocab_size;
  tokens_.resize(size_t(T + 1));
  inputs_.resize(size_t(count) * T);
  labels_.resize(size_t(count) * T);
  for (int b = 0; b < count; ++b) {
    data.sample(first_sample + b, tokens_.data());
    for (int t = 0; t <= T; ++t)
      OCC_CHECK(tokens_[size_t(t)] >= 0 && tokens_[size_t(t)] < V,
                "token id {} in {} is outside the tokenizer's vocabulary of {}; use the --tokenizer-model the data "
                "was preprocessed with",
                tokens_[size_t(t)], opt_.data_path, V);
    std::copy(tokens_.begin(), tokens_.end() - 1, inputs_.begin() + b * T);
    std::copy(tokens_.begin() + 1, tokens_.end(), labels_.begin() + b * T);
  }
}

IterationStats Trainer::train_step() {
  const double start = now_seconds();
  PhaseTimers& timers = stage_->timers();
  timers.reset();
  const int mbs = opt_.micro_batch_size, T = opt_.model.seq_length;
  const int64_t M = opt_.num_micro_batches(layout_.dp_size);
  const int64_t batch_start = consumed_samples_;
  stage_->zero_grads();
  double loss_sum = 0.0;
  for (int64_t j = 0; j < M; ++j) {
    // Megatron sampler order: micro-batch j of DP rank d holds global-batch
    // samples [j*mbs*DP + d*mbs, +mbs).
    const int64_t sample_base = j * mbs * layout_.dp_size + int64_t(layout_.dp_rank) * mbs;
    {
      ScopedPhase t(timers, "data");
      read_batch(*train_data_, batch_start + sample_base, mbs);
    }
    MicroBatch mb{inputs_.data(), labels_.data(), mbs, T, sample_base, iteration_, 1.0f / float(int64_t(mbs) * T * M)};
    {
      ScopedPhase t(timers, "forward");
      loss_sum += stage_->forward(acts_, mb, nullptr, nullptr, true);
    }
    {
      ScopedPhase t(timers, "backward");
      stage_->backward(acts_, mb, nullptr, nullptr);
    }
  }
  IterationStats s;
  s.iteration = iteration_ + 1;
  {
    ScopedPhase t(timers, "optimizer");
    auto& grads = stage_->grads();
    s.grad_norm = std::sqrt(local_grad_sq_norm(stage_->param_layout(), grads.data()));
    clip_grads(grads.data(), int64_t(grads.size()), s.grad_norm, opt_.clip_grad);
    s.lr = opt_.lr_schedule().at(s.iteration);
    optimizer_->update(stage_->params().data(), grads.data(), s.lr, s.iteration);
  }
  s.loss = loss_sum / double(int64_t(mbs) * T * M);
  iteration_ += 1;
  consumed_samples_ += opt_.global_batch_size;
  s.ms = (now_seconds() - start) * 1e3;
  s.tokens_per_s = double(opt_.global_batch_size) * T / (s.ms / 1e3);
  return s;
}

double Trainer::evaluate() {
  OCC_CHECK(valid_data_, "no validation data: the --split gives the validation set no documents, or --eval-iters is 0");
  const int mbs = opt_.micro_batch_size, T = opt_.model.seq_length;
  const int64_t total = opt_.eval_iters * opt_.global_batch_size;
  double loss_sum = 0.0;
  StageActivations acts;
  // The same first eval_iters global batches every time, so points on the curve compare.
  for (int64_t first = 0; first < total; first += mbs) {
    read_batch(*valid_data_, first, mbs);
    MicroBatch mb{inputs_.data(), labels_.data(), mbs, T, first, iteration_, 0.0f};
    loss_sum += stage_->forward(acts, mb, nullptr, nullptr, false);
  }
  return loss_sum / double(total * T);
}

void Trainer::log_iteration(const IterationStats& s) {
  if (metrics_) {
    nlohmann::json j = {{"iter", s.iteration},     {"loss", s.loss}, {"lr", s.lr},
                        {"grad_norm", s.grad_norm}, {"ms", s.ms},     {"tokens_per_s", s.tokens_per_s},
                        {"consumed_samples", consumed_samples_}};
    if (s.val_loss) j["val_loss"] = *s.val_loss;
    nlohmann::json timers = nlohmann::json::object();
    for (const auto& [phase, ms] : stage_->timers().ms()) timers[phase] = ms;
    j["timers"] = timers;
    std::fprintf(metrics_, "%s\n", j.dump().c_str());
    std::fflush(metrics_);
  }
  const bool show = s.iteration % opt_.log_interval == 0 || s.iteration == opt_.train_iters || s.val_loss;
  if (!show) return;
  const double elapsed = now_seconds() - run_start_;
  const double per_iter = elapsed / double(s.iteration - first_iteration_);
  const std::string line = fmt::format(
      "iter {:>{}}/{} | loss {:.4f} | lr {:.3e} | grad norm {:.3f} | {:.0f} tok/s | {:.1f} ms/it | ETA {}",
      s.iteration, int(std::to_string(opt_.train_iters).size()), opt_.train_iters, s.loss, s.lr, s.grad_norm,
      s.tokens_per_s, s.ms, format_duration(per_iter * double(opt_.train_iters - s.iteration)));
  if (tty_ && !s.val_loss && s.iteration != opt_.train_iters) {
    std::printf("\r%s\033[K", line.c_str());
  } else {
    std::printf("%s%s\n", tty_ ? "\r\033[K" : "", line.c_str());
  }
  if (s.val_loss) std::printf("validation loss at iter %lld: %.4f (ppl %.2f)\n", (long long)s.iteration, *s.val_loss,
                              std::exp(*s.val_loss));
  std::fflush(stdout);
}

void Trainer::run() {
  std::printf("model: %lld parameters (%d layers, hidden %d, %d heads, seq %d, vocab %d padded to %d); "
              "%lld micro-batches of %d per iteration\n",
              (long long)opt_.model.num_parameters(), opt_.model.num_layers, opt_.model.hidden_size,
              opt_.model.num_attention_heads, opt_.model.seq_length, opt_.model.vocab_size,
              opt_.model.padded_vocab_size(), (long long)opt_.num_micro_batches(layout_.dp_size),
              opt_.micro_batch_size);
  if (valid_data_ && iteration_ == 0) std::printf("validation loss at start: %.4f\n", evaluate());
  run_start_ = now_seconds();
  first_iteration_ = iteration_;
  while (iteration_ < opt_.train_iters) {
    IterationStats s = train_step();
    const bool last = iteration_ == opt_.train_iters;
    if (valid_data_ && ((opt_.eval_interval > 0 && iteration_ % opt_.eval_interval == 0) || last))
      s.val_loss = evaluate();
    log_iteration(s);
    if (!opt_.save.empty() && ((opt_.save_interval > 0 && iteration_ % opt_.save_interval == 0) || last))
      save_checkpoint();
  }
}

void Trainer::save_checkpoint() {
  occ::save_checkpoint(opt_.save, opt_, layout_, *stage_, *optimizer_, {iteration_, consumed_samples_});
}

void Trainer::load_checkpoint(const std::string& root) {
  CheckpointPosition pos = occ::load_checkpoint(root, opt_, layout_, *stage_, optimizer_.get());
  iteration_ = pos.iteration;
  consumed_samples_ = pos.consumed_samples;
  std::printf("loaded checkpoint %s at iteration %lld\n", root.c_str(), (long long)iteration_);
  OCC_CHECK(iteration_ <= opt_.train_iters,
            "checkpoint {} is at iteration {}, beyond --train-iters {}; raise --train-iters to continue", root,
            iteration_, opt_.train_iters);
}

}  // namespace occ
