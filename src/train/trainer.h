#pragma once
// The training loop of one rank of a TP x PP x DP job. The Trainer wires the
// parts together and runs the iterations: data, the model's forward and
// backward per micro-batch (driven by the PipelineExecutor: 1F1B, plain or
// interleaved over model chunks), gradient
// synchronisation (GradientSync), clipping, AdamW, evaluation, checkpoints
// (with the compressors' state: CompressionState), metrics and the trace.
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

#include "compress/compressed_backprop.h"
#include "compress/compression_state.h"
#include "compress/lep_probe.h"
#include "data/gpt_dataset.h"
#include "data/training_data.h"
#include "model/gpt.h"
#include "parallel/param_gather.h"
#include "parallel/pipeline_exchange.h"
#include "parallel/pipeline_executor.h"
#include "parallel/topology.h"
#include "train/adamw.h"
#include "train/checkpoint_writer.h"
#include "train/diloco.h"
#include "train/gradient_sync.h"
#include "train/job_comm.h"
#include "train/metrics.h"
#include "train/nonfinite_guard.h"
#include "train/loss_scaler.h"
#include "train/options.h"
#include "train/straggler_watch.h"
#include "train/tensorboard_log.h"
#include "train/token_dump.h"

namespace occ {

class Trainer {
 public:
  Trainer(TrainOptions options, int world_rank, int world_size);  // local: may throw occ::Error
  ~Trainer();
  // The data's indices, built into the cache by one rank (then the first rank of
  // each node) while the others wait (apps/commands/train.cpp); returns lines to
  // print. Then every rank maps them (local).
  std::vector<std::string> build_data_indices();
  void open_data();
  void connect(double comm_timeout_s);                             // collective over MPI_COMM_WORLD
  void load();                                                     // --load, if given (local)
  void announce_compression_state();                               // collective: notices about --load
  // Trains from the current iteration (0, or the loaded checkpoint's) to train_iters.
  void run();
  // Mean loss per token over --eval-iters global batches of `data` (the "valid"
  // or "test" set) from `first_sample` on (collective).
  double evaluate(const SampleSource& data, const char* set, int64_t first_sample);
  bool is_logger() const { return world_rank_ == 0; }
  // The checkpoint iteration --load resumes (checkpoint_to_resume); nullopt: none (no --load,
  // or Megatron's resume pattern on a first start).
  std::optional<int64_t> resume_iteration() const { return resume_iteration_; }
  const ParallelLayout& layout() const { return layout_; }

 private:
  IterationStats train_step();
  void run_schedule(int M);
  void read_micro_batch(const SampleSource& data, int64_t first_sample, int slot);
  MicroBatch micro_batch(int slot, int64_t sample_base, float grad_scale) const;
  void check_lep(int slot, int chunk, const float* grad);
  // --overlap-param-gather: blocks until the parameters [offset, offset +
  // numel) of the last update have been all-gathered (numel < 0: all of them),
  // adding the time waited to dp_allgather (the exposed part).
  void wait_for_params(int64_t offset = 0, int64_t numel = -1);
  // Starts a save of this iteration (committed at once, or with --async-save
  // once every rank has written its files: finish_save).
  void save_checkpoint();
  // Collective, where a save is pending: commits it if every rank has written
  // its files (block: after waiting for this rank's); throws AgreedError if one failed.
  void finish_save(bool block);
  // Collective, without the communication timeout (busy meanwhile): whether
  // the logging rank's part of a save failed (error_here: its error, "" when it
  // did not); throws AgreedError with it on every rank when it did.
  void agree_on_save(const std::string& error_here, const char* waiting_for);
  std::string deepest_save_path() const;
  CompressionState compression_state() {
    std::vector<CompressedBackprop*> links;
    for (auto& link : cb_links_.send) links.push_back(link.get());
    return {links, grad_sync_->dp_compressor()};
  }
  // What a checkpoint records of the data (the blends), to refuse resuming on other data.
  const nlohmann::json& data_fingerprint() const { return data_->fingerprint(); }
  // Distributed optimizer, 16-bit parameter wire: every owner's fp32 master
  // weights to DP rank 0, which writes them (collective over DP).
  void gather_master_weights();
  std::string compression_state_path(const std::string& dir) const;
  void log_iteration(const IterationStats& s);

  TrainOptions opt_;
  std::optional<int64_t> resume_iteration_;  // what load() resumes (see resume_iteration())
  int world_rank_ = 0, world_size_ = 1;
  ParallelLayout layout_;
  std::unique_ptr<Topology> topo_;
  // The GPU, staging and NCCL groups of this rank (connect()). Declared before
  // the stage and the gradient sync, which use its groups.
  std::unique_ptr<JobComm> comm_;
  // The host copy of the parameters that the distributed optimizer's
  // all-gather works on (the parameters themselves when not staged).
  std::unique_ptr<HostMirror> params_host_;           // with the distributed optimizer only
  std::vector<float> lep_input_, lep_grad_;           // --check-lep's host copies of the link's slices
  std::unique_ptr<TrainingData> data_;                  // train / validation / test sets
  std::unique_ptr<GptStage> stage_;
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<OptimizerShards> shards_;                // --use-distributed-optimizer with DP > 1
  std::unique_ptr<OverlappedParamGather> param_gather_;    // and --overlap-param-gather
  std::unique_ptr<LossScaler> loss_scaler_;                // --fp16 (inactive otherwise)
  std::unique_ptr<GradientSync> grad_sync_;
  std::unique_ptr<PipelineExchange> exchange_;
  CompressedBackpropLinks cb_links_;                       // this rank's backward links out / in, per chunk
  std::unique_ptr<CompressedActivations> act_send_, act_recv_;  // --activation-comp-method: forward link out / in
  std::unique_ptr<PipelineExecutor> executor_;
  std::unique_ptr<Diloco> diloco_;                          // --diloco-inner-steps: the outer steps
  LepProbe lep_probe_;                                      // --check-lep
  std::unique_ptr<ExitControl> exit_;                       // --exit-signal-handler / -interval / -duration
  std::unique_ptr<CheckpointWriter> checkpoint_writer_;     // inline, or --async-save's thread
  double save_snapshot_s_ = 0;                              // the training thread's part of the pending save
  std::shared_ptr<std::vector<float>> host_params_, host_m_, host_v_;  // a save's host copies, reused
  NonfiniteGuard nonfinite_{0};                             // --skip-nonfinite
  CompressionNotice compression_notice_ = CompressionNotice::None;  // set by load()
  std::vector<StageActivations> acts_;                      // one per in-flight micro-batch
  MicroBatchTokens tokens_;                                  // per slot
  int64_t iteration_ = 0, consumed_samples_ = 0;
  int64_t consumed_valid_samples_ = 0;  // Megatron's consumed_valid_samples: the validation stream's position
  double run_start_ = 0;
  int64_t first_iteration_ = 0;
  std::FILE* metrics_ = nullptr;
  std::unique_ptr<TensorBoardLog> tensorboard_;             // --tensorboard-dir, on the logging rank
  std::unique_ptr<TokenDump> token_dump_;                   // --debug-dump-tokens (tests)
  TrafficTotals traffic_;
  StragglerWatch straggler_;                                 // on the logging rank
  bool tty_ = false;
};

}  // namespace occ
