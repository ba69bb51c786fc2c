#include "train/tensorboard_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"

namespace occ {
namespace {

constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

// Protocol-buffer wire format: the few pieces an Event needs.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  out.push_back(char(v));
}
void put_tag(std::string& out, int field, int wire_type) { put_varint(out, uint64_t(field) << 3 | uint64_t(wire_type)); }
template <class T>
void put_fixed(std::string& out, T v) {  // little-endian, as x86-64 and aarch64 store it
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  out.append(bytes, sizeof(T));
}
void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

// Event {wall_time = 1 (double), step = 2 (int64)} and then one of its payloads.
std::string event_head(double wall_time, int64_t step) {
  std::string e;
  put_tag(e, 1, 1);
  put_fixed(e, wall_time);
  put_tag(e, 2, 0);
  put_varint(e, uint64_t(step));
  return e;
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || !name[0]) return "localhost";
  std::string s = name;
  for (char& c : s)
    if (c == '/') c = '_';
  return s;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) c = kCrc32cTable[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t c = crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  OCC_CHECK(!ec, "cannot create --tensorboard-dir {}: {}; give a directory that can be created and written", dir,
            ec.message());
  // A new file per process, as torch's SummaryWriter makes: a resumed run adds its
  // own, which TensorBoard reads after the earlier ones (the names sort by time).
  const std::string base = fmt::format("{}/events.out.tfevents.{}.{}.{}", dir, int64_t(std::time(nullptr)),
                                       host_name(), int64_t(getpid()));
  int fd = -1;
  for (int attempt = 0; fd < 0 && attempt < 100; ++attempt) {
    path_ = attempt == 0 ? base : fmt::format("{}.{}", base, attempt);
    fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) break;
  }
  OCC_CHECK(fd >= 0, "cannot write in --tensorboard-dir {}: cannot create {}: {}; give a directory that can be "
            "created and written", dir, path_, std::strerror(errno));
  file_ = ::fdopen(fd, "wb");
  OCC_CHECK(file_, "cannot open {}: {}", path_, std::strerror(errno));
  std::string e = event_head(double(std::time(nullptr)), 0);  // (TensorBoard ignores this record's time)
  put_bytes(e, 3, "brain.Event:2");
  write_record(e);
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::write_record(const std::string& bytes) {
  std::string rec;
  put_fixed(rec, uint64_t(bytes.size()));
  put_fixed(rec, masked_crc32c(rec.data(), 8));
  rec += bytes;
  put_fixed(rec, masked_crc32c(bytes.data(), bytes.size()));
  OCC_CHECK(std::fwrite(rec.data(), 1, rec.size(), file_) == rec.size(), "cannot write {}: {}; check the disk",
            path_, std::strerror(errno));
}

void TensorBoardWriter::add_scalars(int64_t step, double wall_time,
                                    const std::vector<std::pair<std::string, float>>& values) {
  if (values.empty()) return;
  std::string summary;
  for (const auto& [tag, value] : values) {
    std::string v;
    put_bytes(v, 1, tag);
    put_tag(v, 2, 5);
    put_fixed(v, value);
    put_bytes(summary, 1, v);
  }
  std::string e = event_head(wall_time, step);
  put_bytes(e, 5, summary);
  write_record(e);
}

void TensorBoardWriter::restart_at(int64_t step, double wall_time) {
  std::string session_log;
  put_tag(session_log, 1, 0);
  put_varint(session_log, 1);  // SessionLog.START
  std::string e = event_head(wall_time, step);
  put_bytes(e, 6, session_log);
  write_record(e);
}

void TensorBoardWriter::flush() {
  OCC_CHECK(std::fflush(file_) == 0, "cannot write {}: {}; check the disk", path_, std::strerror(errno));
}

}  // namespace occ
