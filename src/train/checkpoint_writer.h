#pragma once
// Writes one rank's files of a checkpoint save: inline, or (--async-save,
// Megatron's flag) on a thread of its own while training goes on.
//
// The files arrive as snapshots in host memory (TensorFileWriter copies the
// tensors when they are added, at the iteration boundary), so training may
// change the weights at once. Each file is written atomically (temp file,
// fsync, rename, fsync of the directory) into the save's staging directory;
// nothing is visible until the save is committed (train/checkpoint_store.h).
//
// Inline, the write runs on a thread too, while the training thread waits for
// it and shows its progress in the heartbeat (a write of many GB takes minutes).
// The thread makes no MPI call: whether every rank has written its files, and
// the commit, are agreed on the training thread (Trainer::finish_save), so the
// design needs no MPI thread level beyond the one the main thread uses. One
// save at a time: the caller takes the result of one before starting the next.
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "core/layout.h"
#include "train/checkpoint.h"

namespace occ {

class CheckpointWriter {
 public:
  // background: write on a thread (--async-save); delay_s: a test-only pause
  // before the writing starts, on a rank with files to write (--debug-save-delay).
  CheckpointWriter(bool background, double delay_s);
  ~CheckpointWriter();  // waits for a write in flight (its result is dropped: nothing commits it)
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Writes this rank's `files` of the save of `iteration` into `staging`,
  // stamped with `save_id` (CheckpointFiles::write; inline: before returning).
  // `error`: this rank already failed to prepare the save (nothing is then
  // written); the error is reported as the write's.
  void start(int64_t iteration, CheckpointFiles files, std::string staging, const ParallelLayout& layout,
             std::string save_id, std::string error = {});
  bool pending() const { return pending_; }       // started, not yet cleared
  int64_t iteration() const { return iteration_; }
  bool written() const;                           // done or failed: wait() would not block
  // Blocks until this rank's files are written; the error ("" when all were).
  const std::string& wait();
  double write_seconds() const { return write_s_; }  // after wait(): how long the writing took
  // How far this rank's write is, for the heartbeat's busy text: "checkpoint
  // write: 120 MB" (what its files hold on disk so far). Training thread.
  std::string progress() const;
  void clear();                                   // after the save was committed or given up

 private:
  void write_all();

  bool background_;
  double delay_s_;
  bool pending_ = false;
  int64_t iteration_ = -1;
  CheckpointFiles files_;
  std::string staging_, save_id_;
  ParallelLayout layout_;
  std::string error_;
  double write_s_ = 0;
  std::atomic<bool> written_{false};
  std::thread thread_;
};

}  // namespace occ
