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
// The thread makes no MPI call: whether every rank has written its files, and
// the commit, are agreed on the training thread (Trainer::finish_save), so the
// design needs no MPI thread level beyond the one the main thread uses. One
// save at a time: the caller takes the result of one before starting the next.
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "core/tensor_file.h"

namespace occ {

class CheckpointWriter {
 public:
  struct File {
    std::string path;
    TensorFileWriter contents;
  };

  // background: write on a thread (--async-save); delay_s: a test-only pause
  // before the writing starts (--debug-save-delay).
  CheckpointWriter(bool background, double delay_s);
  ~CheckpointWriter();  // waits for a write in flight (its result is dropped: nothing commits it)
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Writes `files` of the save of `iteration` (inline: before returning).
  // `error`: this rank already failed to prepare the save (the files are
  // then not written); the error is reported as the write's.
  void start(int64_t iteration, std::vector<File> files, std::string error = {});
  bool pending() const { return pending_; }       // started, not yet cleared
  int64_t iteration() const { return iteration_; }
  bool written() const;                           // done or failed: wait() would not block
  // Blocks until this rank's files are written; the error ("" when all were).
  const std::string& wait();
  double write_seconds() const { return write_s_; }  // after wait(): how long the writing took
  void clear();                                   // after the save was committed or given up

 private:
  void write_all();

  bool background_;
  double delay_s_;
  bool pending_ = false;
  int64_t iteration_ = -1;
  std::vector<File> files_;
  std::string error_;
  double write_s_ = 0;
  std::atomic<bool> written_{false};
  std::thread thread_;
};

}  // namespace occ
