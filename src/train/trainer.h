#pragma once
// The training loop of one rank: data, micro-batches, gradient accumulation,
// clipping, AdamW, evaluation, checkpoints, metrics and progress.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"
#include "model/gpt.h"
#include "train/adamw.h"
#include "train/options.h"

namespace occ {

struct IterationStats {
  int64_t iteration = 0;
  double loss = 0, grad_norm = 0, ms = 0, tokens_per_s = 0;
  float lr = 0;
  std::optional<double> val_loss;
};

class Trainer {
 public:
  explicit Trainer(TrainOptions options);
  ~Trainer();
  // Trains from the current iteration (0, or the loaded checkpoint's) to train_iters.
  void run();
  double evaluate();  // mean validation loss per token
  int64_t iteration() const { return iteration_; }
  GptStage& stage() { return *stage_; }

 private:
  IterationStats train_step();
  void load_checkpoint(const std::string& dir);
  void save_checkpoint();
  void read_batch(const GptDataset& data, int64_t first_sample, int count);
  void log_iteration(const IterationStats& s);

  TrainOptions opt_;
  ParallelLayout layout_;
  SelfCommunicator self_;
  std::unique_ptr<IndexedDataset> dataset_;
  std::unique_ptr<GptDataset> train_data_, valid_data_;
  std::unique_ptr<GptStage> stage_;
  std::unique_ptr<AdamW> optimizer_;
  StageActivations acts_;
  std::vector<int32_t> tokens_, inputs_, labels_;
  int64_t iteration_ = 0, consumed_samples_ = 0;
  double run_start_ = 0;
  int64_t first_iteration_ = 0;
  std::FILE* metrics_ = nullptr;
  bool tty_ = false;
};

}  // namespace occ
