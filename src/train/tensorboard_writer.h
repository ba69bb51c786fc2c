#pragma once
// TensorBoard's event file, written by hand (no protobuf or TensorFlow dependency):
// DIR/events.out.tfevents.<seconds>.<host>.<pid>, a sequence of TFRecords (uint64
// length, masked CRC-32C of the length, the bytes, masked CRC-32C of the bytes), each
// an `Event` protobuf: wall_time (field 1, double), step (2, int64), then
// file_version (3, "brain.Event:2", the first record), a summary (5) of repeated
// `Summary.Value` {tag (1), simple_value (2, float)}, or a session_log (6)
// {status (1): START}. TensorBoard, torch's SummaryWriter and Megatron's
// --tensorboard-dir write the same records.
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace occ {

// CRC-32C (Castagnoli, reflected 0x82F63B78) and TFRecord's mask of it:
// ((c >> 15) | (c << 17)) + 0xa282ead8.
uint32_t crc32c(const void* data, size_t size);
uint32_t masked_crc32c(const void* data, size_t size);

class TensorBoardWriter {
 public:
  // Creates DIR (with its parents) and a new event file there whose first record
  // is the file version: the start-up check that --tensorboard-dir is writable.
  // Throws a one-line occ::Error naming the path and the reason.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One Event holding these scalars at `step`.
  void add_scalars(int64_t step, double wall_time, const std::vector<std::pair<std::string, float>>& values);
  // A SessionLog START at `step`: readers drop the points at or after it that an
  // earlier, interrupted run logged (what torch's SummaryWriter(purge_step=step)
  // writes), so a resumed run's curve continues the saved one.
  void restart_at(int64_t step, double wall_time);
  // Hands everything written to the kernel: a SIGKILL after it loses nothing.
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& bytes);

  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace occ
