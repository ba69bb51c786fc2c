#include "train/checkpoint_writer.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <exception>
#include <utility>

#include "core/error.h"
#include "core/timer.h"

namespace occ {

namespace {
constexpr int kBackgroundNice = 10;  // (a nice 10 thread gets ~1/10 of a core a nice 0 one wants too)
}  // namespace

CheckpointWriter::CheckpointWriter(bool background, double delay_s) : background_(background), delay_s_(delay_s) {}

CheckpointWriter::~CheckpointWriter() {
  if (thread_.joinable()) thread_.join();
}

void CheckpointWriter::start(int64_t iteration, CheckpointFiles files, std::string staging,
                             const ParallelLayout& layout, std::string save_id, std::string error) {
  OCC_CHECK(!pending_, "internal: checkpoint save {} started while save {} is pending", iteration, iteration_);
  pending_ = true;
  iteration_ = iteration;
  files_ = std::move(files);
  staging_ = std::move(staging);
  layout_ = layout;
  save_id_ = std::move(save_id);
  error_ = std::move(error);
  write_s_ = 0;
  written_.store(false);
  if (!error_.empty()) {
    files_ = CheckpointFiles();
    written_.store(true);
  } else if (background_) {
    thread_ = std::thread([this] {
      // Below the training thread: where cores are short, the write waits for
      // them rather than slowing the step (where they are not, nice changes nothing).
      setpriority(PRIO_PROCESS, pid_t(syscall(SYS_gettid)), kBackgroundNice);
      write_all();
    });
  } else {
    write_all();
  }
}

void CheckpointWriter::write_all() {
  const double start = now_seconds();
  if (delay_s_ > 0) std::this_thread::sleep_for(std::chrono::duration<double>(delay_s_));
  try {
    files_.write(staging_, layout_, save_id_);
  } catch (const std::exception& e) {
    error_ = e.what();
  }
  files_ = CheckpointFiles();  // the host copies are not needed any more
  write_s_ = now_seconds() - start;
  written_.store(true, std::memory_order_release);
}

bool CheckpointWriter::written() const { return written_.load(std::memory_order_acquire); }

const std::string& CheckpointWriter::wait() {
  if (thread_.joinable()) thread_.join();
  return error_;
}

void CheckpointWriter::clear() {
  if (thread_.joinable()) thread_.join();
  pending_ = false;
  iteration_ = -1;
  error_.clear();
}

}  // namespace occ
