#pragma once
// The training loop of one rank of a TP x PP x DP job: data, the 1F1B
// pipeline schedule, bucketed data-parallel gradient averaging, embedding
// synchronisation, clipping, AdamW, evaluation, checkpoints, metrics, trace.
//
// Construction is split so that the command line can make every rank agree on
// errors before any collective runs: prepare() is local (validation, data,
// tokenizer), connect() is collective (process groups, model), load() local.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compress/compressed_backprop.h"
#include "compress/dp_powersgd.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"
#include "model/gpt.h"
#include "parallel/grad_sync.h"
#include "parallel/pipeline_exchange.h"
#include "parallel/topology.h"
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
  Trainer(TrainOptions options, int world_rank, int world_size);  // local: may throw occ::Error
  ~Trainer();
  void connect(double comm_timeout_s);                             // collective over MPI_COMM_WORLD
  void load();                                                     // --load, if given (local)
  void announce_compression_state();                               // collective: notices about --load
  // Trains from the current iteration (0, or the loaded checkpoint's) to train_iters.
  void run();
  double evaluate();  // mean validation loss per token (collective)
  bool is_logger() const { return world_rank_ == 0; }
  const ParallelLayout& layout() const { return layout_; }

 private:
  void check_token_range() const;
  IterationStats train_step();
  void run_schedule(int64_t M, double& loss_sum);
  void read_micro_batch(const GptDataset& data, int64_t first_sample, int slot);
  MicroBatch micro_batch(int slot, int64_t sample_base, float grad_scale) const;
  void sync_gradients();
  void check_lep(int slot, const float* grad);
  bool dp_compressing() const;
  void save_checkpoint();
  void save_compression_state(const std::string& staging);
  void load_compression_state();
  void log_iteration(const IterationStats& s);
  void write_trace();
  void print_traffic_summary() const;

  TrainOptions opt_;
  int world_rank_ = 0, world_size_ = 1;
  ParallelLayout layout_;
  std::unique_ptr<Topology> topo_;
  std::unique_ptr<IndexedDataset> dataset_;
  std::unique_ptr<GptDataset> train_data_, valid_data_;
  std::unique_ptr<GptStage> stage_;
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<DataParallelReducer> reducer_;
  std::unique_ptr<PipelineExchange> exchange_;
  std::unique_ptr<CompressedBackprop> cb_send_, cb_recv_;  // this stage's backward link out / in
  std::unique_ptr<DataParallelPowerSgd> dp_comp_;
  std::vector<float> lep_prev_input_;
  int compression_notice_ = 0;  // set by load_compression_state()  // --check-lep: the previous micro-batch's input slice
  std::vector<StageActivations> acts_;                       // one per in-flight micro-batch
  std::vector<std::vector<int32_t>> inputs_, labels_;         // per slot
  std::vector<std::vector<float>> fwd_send_, bwd_send_;       // per micro-batch (in flight until wait_sends)
  std::vector<float> x_in_, dx_out_;
  std::vector<int32_t> tokens_;
  int64_t iteration_ = 0, consumed_samples_ = 0;
  double run_start_ = 0;
  int64_t first_iteration_ = 0;
  std::FILE* metrics_ = nullptr;
  nlohmann::json traffic_sent_ = nlohmann::json::object(), traffic_saved_ = nlohmann::json::object();
  bool tty_ = false;
};

}  // namespace occ
