#include "train/trainer.h"

// The trainer's checkpoint half: loading the checkpoint to resume, saving
// (synchronously or through the background writer) and the state beside the
// weights (DiLoCo's replicas, the compressors'). trainer.cpp wires and runs.

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "comm/untimed_agreement.h"
#include "core/heartbeat.h"
#include "train/checkpoint.h"
#include "train/checkpoint_merge.h"
#include "train/checkpoint_store.h"
#include "train/checkpoint_writer.h"
#include "train/output_paths.h"
#include "train/save_in_flight.h"

namespace occ {
namespace {
// DiLoCo's state of this rank (its replica's own) inside a checkpoint directory.
std::string diloco_state_path(const std::string& dir, const ParallelLayout& l) {
  return shard_dir(dir, l.tp_rank, l.pp_rank) + "/" + Diloco::file_name(l.dp_rank);
}
}  // namespace

void Trainer::load() {
  if (opt_.load.empty()) return;
  if (!resume_iteration_) {  // Megatron's resume pattern, on its first start
    if (is_logger())
      std::printf("notice: --load %s holds no checkpoint yet; training from scratch (Megatron's resume pattern: "
                  "--save and --load the same directory)\n",
                  opt_.load.c_str());
    return;
  }
  const int64_t resume = *resume_iteration_;
  heartbeat::Busy busy("loading the checkpoint");
  if (opt_.finetune) {
    // Megatron's --finetune: the weights only (saved in any layout), iteration 0, a fresh optimizer.
    load_merged_weights(merge_checkpoint(opt_.load, resume), opt_.load, opt_.model, *stage_);
    if (is_logger())
      std::printf("--finetune: loaded the weights of %s (iteration 0, fresh optimizer)\n", opt_.load.c_str());
    return;
  }
  AdamMoments adam;
  CheckpointPosition pos =
      load_checkpoint(opt_.load, resume, opt_, layout_, *stage_, opt_.no_load_optim ? nullptr : &adam);
  // An import holds weights only (no position in any data of ours): --finetune starts from them.
  OCC_CHECK(!(pos.data.is_object() && pos.data.contains(kImportedFromKey)),
            "checkpoint {} was imported (import-hf) from {}; load it with --finetune (its weights at iteration 0, a "
            "fresh optimizer)", opt_.load, pos.data.is_object() ? pos.data.value(kImportedFromKey, std::string()) : "");
  // Any checkpoint holds the whole moments: a shard of them is this rank's (at any DP size).
  if (!opt_.no_load_optim) {
    optimizer_->m().assign_from_host(shards_ ? shards_->take_owned(adam.m) : adam.m);
    optimizer_->v().assign_from_host(shards_ ? shards_->take_owned(adam.v) : adam.v);
  } else if (is_logger()) {
    std::printf("--no-load-optim: Adam's moments start from zero\n");
  }
  // Local (inside the command line's error agreement); the notice is printed
  // by announce_compression_state() once every rank has loaded.
  const std::string loaded_dir = CheckpointStore(opt_.load).iteration_dir(resume);
  compression_notice_ = compression_state().load(compression_state_path(loaded_dir));
  // DiLoCo: this replica's own parameters, moments and the outer state replace the common ones.
  if (diloco_)
    diloco_->resume(diloco_state_path(loaded_dir, layout_), stage_->params(), *optimizer_, pos.iteration, is_logger());
  else
    Diloco::note_unused_state(diloco_state_path(loaded_dir, layout_), is_logger());
  loss_scaler_->load_state(pos.loss_scaler);
  iteration_ = pos.iteration;
  consumed_samples_ = pos.consumed_samples;
  // Megatron's stand-in for a checkpoint that did not record it: one chunk per evaluation interval passed.
  consumed_valid_samples_ =
      pos.consumed_valid_samples >= 0
          ? pos.consumed_valid_samples
          : (opt_.eval_interval > 0 ? iteration_ / opt_.eval_interval : 0) * opt_.eval_iters * opt_.global_batch_size;
  nonfinite_.restore(pos.skipped_nonfinite);
  // A checkpoint of another sample order would continue on another stream of samples.
  if (const std::string order = data_->order_difference(pos.data); !order.empty()) {
    OCC_CHECK(opt_.override_data_check,
              "checkpoint {} was {}; finish that run with the optimus-cc build that started it, or pass "
              "--override-data-check to continue its weights on Megatron's order from sample {}",
              opt_.load, order, consumed_samples_);
    if (is_logger())
      std::printf("notice: --override-data-check: the checkpoint was %s; continuing in Megatron's order from sample "
                  "%lld\n",
                  order.c_str(), (long long)consumed_samples_);
  }
  if (const std::string diff = data_->difference(pos.data); !diff.empty()) {
    OCC_CHECK(opt_.override_data_check,
              "checkpoint {} was {}; resume on the same data, or pass --override-data-check to continue on this one",
              opt_.load, diff);
    if (is_logger())
      std::printf("notice: --override-data-check: continuing on data other than the checkpoint's (%s)\n", diff.c_str());
  }
  OCC_CHECK(iteration_ <= opt_.train_iters,
            "checkpoint {} is at iteration {}, beyond --train-iters {}; raise --train-iters to continue", opt_.load,
            iteration_, opt_.train_iters);
  if (const BlendedDataset* valid = data_->valid()) {
    // The evaluations left read on from there (the last as far as the set's size allows).
    const int64_t chunk = opt_.eval_iters * opt_.global_batch_size;
    const int64_t left = opt_.eval_interval > 0 && !opt_.eval_fixed_set
                             ? opt_.train_iters / opt_.eval_interval - iteration_ / opt_.eval_interval
                             : 0;
    OCC_CHECK(consumed_valid_samples_ + (left + 1) * chunk <= valid->size(),
              "checkpoint {} has read {} validation samples; the {} evaluations left need {} more, beyond the "
              "validation set's {}: resume with the --eval-interval and --eval-iters it was saved with",
              opt_.load, consumed_valid_samples_, left + 1, (left + 1) * chunk, valid->size());
  }
  if (is_logger()) std::printf("loaded checkpoint %s at iteration %lld\n", opt_.load.c_str(), (long long)iteration_);
}

// The longest path a save of this run writes below --save (its last iteration's
// staging directory, this rank's shard and its longest file, as a temporary).
std::string Trainer::deepest_save_path() const {
  std::string longest = kShardStateFile;
  for (const std::string& name : {Diloco::file_name(layout_.dp_rank), CompressionState::file_name(layout_.dp_rank)})
    if (name.size() > longest.size()) longest = name;
  return fmt::format("iter_{:07d}.tmp/{}/{}.tmp", opt_.train_iters,
                     std::filesystem::path(shard_dir("", layout_.tp_rank, layout_.pp_rank)).filename().string(),
                     longest);
}

void Trainer::save_checkpoint() {
  const double start = now_seconds();
  finish_save(true);  // one save at a time: the previous one is committed first
  heartbeat::phase("checkpoint save");
  wait_for_params();  // a checkpoint holds the whole updated parameters
  std::string staging, begin_error;
  if (is_logger()) {
    heartbeat::Busy busy("checkpoint staging");  // (removing a crashed save's leftover can take a while)
    try {
      staging = begin_checkpoint(opt_.save, iteration_);
    } catch (const Error& e) {
      begin_error = e.what();
    }
  }
  agree_on_save(begin_error, "waiting for the checkpoint staging");
  if (!begin_error.empty() || staging.empty()) staging = opt_.save + fmt::format("/iter_{:07d}.tmp", iteration_);
  set_save_in_flight(staging);  // a stop at once removes it

  // The whole moments; with the distributed optimizer gathered from every DP
  // rank's shard into the DP rank 0 that writes the shard file (the others hold
  // one bucket's worth at a time, so a save does not undo the memory saving).
  // Host copies into the last save's buffers, once its writer has let them go:
  // fresh ones would cost the training thread their page faults every save.
  auto host_copy = [](std::shared_ptr<std::vector<float>>& slot, const DeviceBuffer<float>& from) {
    if (!slot || slot.use_count() > 1) slot = std::make_shared<std::vector<float>>();
    slot->resize(from.size());
    from.copy_to_host(slot->data(), from.size());
  };
  host_copy(host_m_, optimizer_->m());
  host_copy(host_v_, optimizer_->v());
  if (shards_) {
    *host_m_ = shards_->gather_full(*host_m_, Traffic::Other, layout_.dp_rank == 0);
    *host_v_ = shards_->gather_full(*host_v_, Traffic::Other, layout_.dp_rank == 0);
    gather_master_weights();
  }
  // This rank's files, copied to host memory now (training may go on while they
  // are written: --async-save); the save's identifier, from every rank's contents
  // (an XOR of 8 bytes over MPI_COMM_WORLD), goes into each of them.
  std::string error;
  CheckpointFiles files;
  try {
    heartbeat::Busy busy("checkpoint snapshot");
    if (layout_.dp_rank == 0) host_copy(host_params_, std::as_const(*stage_).params());
    if (layout_.dp_rank == 0)
      files.add(kShardStateFile,
                checkpoint_shard(opt_, layout_, *stage_, {host_params_, host_m_, host_v_},
                                 {iteration_, consumed_samples_,
                                  loss_scaler_->active() ? loss_scaler_->state() : nlohmann::json(),
                                  nonfinite_.skipped(), data_fingerprint(), consumed_valid_samples_}));
    // Compressor state differs per DP rank (local errors), so every rank saves its own.
    if (const CompressionState state = compression_state(); !state.empty())
      files.add(CompressionState::file_name(layout_.dp_rank),
                state.state({{"iteration", iteration_}, {"config", opt_.to_json()}}));
    if (diloco_)  // every replica's own state
      files.add(Diloco::file_name(layout_.dp_rank),
                diloco_->state(std::as_const(*stage_).params(), *optimizer_, iteration_));
  } catch (const Error& e) {
    error = e.what();
  }
  uint64_t digest = files.digest(layout_, iteration_);
  MPI_Allreduce(MPI_IN_PLACE, &digest, 1, MPI_UINT64_T, MPI_BXOR, topo_->world->handle());
  {
    heartbeat::Busy busy("checkpoint write");  // (inline unless --async-save)
    checkpoint_writer_->start(iteration_, std::move(files), staging, layout_, save_id(digest), std::move(error));
  }
  save_snapshot_s_ = now_seconds() - start;
  if (!opt_.async_save) finish_save(true);
}

void Trainer::finish_save(bool block) {
  CheckpointWriter& writer = *checkpoint_writer_;
  if (!writer.pending()) return;
  const double start = now_seconds();
  // Blocking, a rank waits here for its own write, then for every other rank's,
  // however long they take (a 15 GB shard on a network file system): busy in
  // its heartbeat (the supervisor's hang detection does not count it), with its
  // own write's progress shown, and with no --comm-timeout.
  std::optional<heartbeat::Busy> busy;
  if (block) {
    busy.emplace("checkpoint write");
    while (!writer.written()) {
      heartbeat::busy_text(writer.progress());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  const bool written = writer.written();
  const std::string error = written ? writer.wait() : std::string();
  // In place of a barrier, every rank says [failed, still writing]. A full disk
  // fails several ranks at once; the lowest of them reports (one line for the
  // job), nothing is committed, and the previous checkpoint stays the latest.
  heartbeat::phase("checkpoint agreement");
  float flags[2] = {error.empty() ? 0.0f : float(world_size_ - world_rank_), written ? 0.0f : 1.0f};
  if (block) {
    heartbeat::busy_text("waiting for the checkpoint writers");
    allreduce_max_untimed(*topo_->world, flags, 2, Traffic::Other);
  } else {
    topo_->world->allreduce_max(flags, 2, Traffic::Other);  // between iterations: every rank is there
  }
  if (flags[0] > 0) {
    if (is_logger()) abort_checkpoint(opt_.save, writer.iteration());  // no half-written save left behind
    set_save_in_flight("");
    writer.clear();
    throw AgreedError(error, world_size_ - int(flags[0]));
  }
  if (flags[1] > 0) return;  // a rank is still writing: asked again after the next iteration
  const int64_t iteration = writer.iteration();
  // The commit (and --keep-last's deletions) on the logging rank, busy; the
  // others wait for it without the timeout, and a failure of it ends every rank.
  std::string commit_error;
  if (is_logger()) {
    heartbeat::Busy committing("checkpoint commit");
    try {
      commit_checkpoint(opt_.save, iteration);
      if (opt_.keep_last > 0) CheckpointStore(opt_.save).keep_last(opt_.keep_last);
    } catch (const Error& e) {
      commit_error = e.what();
    }
  }
  set_save_in_flight("");
  if (!commit_error.empty() && is_logger()) abort_checkpoint(opt_.save, iteration);
  if (!commit_error.empty() || !is_logger()) writer.clear();
  agree_on_save(commit_error, "waiting for the checkpoint commit");
  if (!is_logger()) return;
  const double ms = (save_snapshot_s_ + (opt_.async_save ? 0.0 : now_seconds() - start)) * 1e3;
  if (opt_.async_save)
    std::printf("saved checkpoint %s/iter_%07lld (written in the background in %.0f ms; %.1f ms of the training "
                "thread)\n",
                opt_.save.c_str(), (long long)iteration, writer.write_seconds() * 1e3, ms);
  else
    std::printf("saved checkpoint %s/iter_%07lld (%.1f ms)\n", opt_.save.c_str(), (long long)iteration, ms);
  writer.clear();
}

// Every rank learns whether the logging rank's step of a save (opening the
// staging directory, the commit) failed, waiting for it without the timeout
// (busy): it may take long on a slow file system. A failure, said by the
// logging rank, ends every rank (AgreedError).
void Trainer::agree_on_save(const std::string& error_here, const char* waiting_for) {
  heartbeat::Busy busy(waiting_for);
  float failed = error_here.empty() ? 0.0f : 1.0f;
  allreduce_max_untimed(*topo_->world, &failed, 1, Traffic::Other);
  if (failed > 0) throw AgreedError(error_here, 0);
}

void Trainer::gather_master_weights() {
  // Parameters that travelled in 16 bits are, outside this rank's chunks, the
  // values the step computes with, not the fp32 master weights the checkpoint
  // holds: DP rank 0 (the writer) takes every owner's. The step's copy of the
  // weights is unchanged by it (it rounds the master weights to those values).
  if (opt_.wire_formats().parameters == Precision::Fp32) return;
  params_host_->download_all();
  const std::vector<float> mine(params_host_->host(), params_host_->host() + std::as_const(*stage_).params().size());
  const std::vector<float> full = shards_->gather_full(shards_->take_owned(mine), Traffic::Other, layout_.dp_rank == 0);
  if (layout_.dp_rank != 0) return;
  std::copy(full.begin(), full.end(), params_host_->host());
  params_host_->upload_all();
  stage_->params();  // the reduced-precision copy is refreshed from them (to the same values)
}

std::string Trainer::compression_state_path(const std::string& dir) const {
  return shard_dir(dir, layout_.tp_rank, layout_.pp_rank) + "/" + CompressionState::file_name(layout_.dp_rank);
}

void Trainer::announce_compression_state() {
  if (!opt_.load.empty()) CompressionState::announce(*topo_->world, compression_notice_, is_logger());
}
}  // namespace occ
