#include "train/checkpoint_writer.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <exception>
#include <filesystem>
#include <utility>

#include "core/error.h"
#include "core/heartbeat.h"
#include "train/checkpoint_store.h"
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
    // Inline: the caller waits, busy, showing how far the write is.
    std::thread writing([this] { write_all(); });
    while (!written()) {
      heartbeat::busy_text(progress());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    writing.join();
  }
}

std::string CheckpointWriter::progress() const {
  // The bytes of this rank's files in the staging directory (the one being written too).
  uint64_t bytes = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(shard_dir(staging_, layout_.tp_rank, layout_.pp_rank), ec), end;
       !ec && it != end; it.increment(ec)) {
    std::error_code size_ec;
    const uintmax_t size = it->file_size(size_ec);
    if (!size_ec) bytes += size;
  }
  return fmt::format("checkpoint write: {:.0f} MB", double(bytes) / 1e6);
}

void CheckpointWriter::write_all() {
  const double start = now_seconds();
  // (Only where there is something to write: a slow disk slows the writers, not the others.)
  if (delay_s_ > 0 && !files_.empty()) std::this_thread::sleep_for(std::chrono::duration<double>(delay_s_));
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
