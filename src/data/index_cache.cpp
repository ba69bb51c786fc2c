#include "data/index_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "core/error.h"

namespace occ {
namespace {

// 2: each array's checksum recorded and checked (1's sets are built again).
constexpr const char* kCacheFormat = "optimus-cc data index cache 2";

// 128 bits of FNV-1a (two 64-bit passes with different offsets): a file name,
// not a proof; the full key is compared on every hit.
std::string key_hash(const std::string& text) {
  uint64_t a = 1469598103934665603ull, b = 0x84222325cbf29ce4ull;
  for (unsigned char c : text) {
    a = (a ^ c) * 1099511628211ull;
    b = (b ^ c) * 1099511628211ull;
  }
  return fmt::format("{:016x}{:016x}", a, b);
}

std::string checksum_text(uint64_t checksum) { return fmt::format("xxh64:{:016x}", checksum); }

// Writes `text` to `path` and flushes it to the disk; throws occ::Error.
void write_durably(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  OCC_CHECK(fd >= 0, "cannot create {}: {}; pass a writable --data-cache-path", path, std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += size_t(n);
  }
  const int err = done < text.size() ? errno : ::fsync(fd) != 0 ? errno : 0;
  ::close(fd);
  if (err != 0 || done < text.size()) {
    ::unlink(path.c_str());
    fail("cannot write {}: {}; check free disk space", path, std::strerror(err ? err : EIO));
  }
}

nlohmann::json shape_json(const std::vector<int64_t>& shape) {
  nlohmann::json j = nlohmann::json::array();
  for (int64_t d : shape) j.push_back(d);
  return j;
}

}  // namespace

std::string default_cache_folder(const std::string& prefix) {
  return (std::filesystem::path(prefix) / "cache" / "GPTDataset_indices").string();
}

std::string fallback_cache_folder() {
  std::error_code ec;
  std::filesystem::path tmp = std::filesystem::temp_directory_path(ec);
  if (ec) tmp = "/tmp";
  return (tmp / fmt::format("optimus-cc-data-cache-{}", ::getuid())).string();
}

std::string size_text(int64_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double v = double(bytes) / 1024.0;
  int unit = 0;
  while (v >= 1024.0 && unit < 3) v /= 1024.0, ++unit;
  // Three significant digits; a value that rounds up to 1024 is shown as it rounds (fine for messages).
  return v >= 100 ? fmt::format("{:.0f} {}", v, kUnits[unit])
         : v >= 10 ? fmt::format("{:.1f} {}", v, kUnits[unit])
                   : fmt::format("{:.2f} {}", v, kUnits[unit]);
}

int64_t free_bytes(const std::string& folder) {
  struct statvfs st {};
  if (::statvfs(folder.c_str(), &st) != 0) return -1;
  return int64_t(st.f_bavail) * int64_t(st.f_frsize);
}

std::string file_version(const std::string& path) {
  struct stat st {};
  OCC_CHECK(::stat(path.c_str(), &st) == 0, "cannot stat {}: {}", path, std::strerror(errno));
  return fmt::format("{}:{}", int64_t(st.st_size), int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec);
}

CachedArrays::CachedArrays(std::string folder, std::string kind, std::string split, nlohmann::json key)
    : folder_(std::move(folder)), key_(std::move(key)) {
  stem_ = fmt::format("{}-{}-{}", key_hash(key_.dump()), kind, split);
}

std::string CachedArrays::path(const std::string& folder, const std::string& array) const {
  return (std::filesystem::path(folder) / fmt::format("{}-{}.npy", stem_, array)).string();
}

std::optional<CachedArrays::Hit> CachedArrays::find(std::string* why, bool verify) const {
  std::string mine, other;
  if (auto hit = find_in(folder_, &mine, verify)) return hit;
  if (auto hit = find_in(fallback_cache_folder(), &other, verify)) return hit;
  if (why) *why = mine;
  return std::nullopt;
}

std::optional<CachedArrays::Hit> CachedArrays::find_in(const std::string& folder, std::string* why, bool verify) const {
  const std::string description = (std::filesystem::path(folder) / (stem_ + "-description.json")).string();
  std::ifstream in(description);
  if (!in) {
    *why = fmt::format("{} is missing", description);
    return std::nullopt;
  }
  nlohmann::json d;
  try {
    d = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception&) {
    *why = fmt::format("{} is not valid JSON", description);
    return std::nullopt;
  }
  if (!d.is_object() || d.value("format", "") != kCacheFormat || d.value("key", nlohmann::json()) != key_ ||
      !d.contains("arrays") || !d["arrays"].is_object()) {
    *why = fmt::format("{} describes other indices", description);
    return std::nullopt;
  }
  Hit hit{folder, d.value("result", nlohmann::json::object()), {}};
  for (const auto& [name, spec] : d["arrays"].items()) {
    try {
      NpyArray a = NpyArray::open(path(folder, name));
      if (spec.value("dtype", "") != npy_descr(a.type()) || spec.value("shape", nlohmann::json()) != shape_json(a.shape())) {
        *why = fmt::format("{} is {} {} where its description says {} {}", a.path(), npy_descr(a.type()),
                           shape_json(a.shape()).dump(), spec.value("dtype", "?"), spec.value("shape", nlohmann::json()).dump());
        return std::nullopt;
      }
      // The bytes too: a crash before they reached the disk leaves a good header over zeros.
      if (const std::string sum = verify ? checksum_text(a.checksum()) : spec.value("checksum", "");
          spec.value("checksum", "") != sum || sum.empty()) {
        *why = fmt::format("{} does not match its checksum ({}, its description says {}): it is damaged", a.path(),
                           sum, spec.value("checksum", "none"));
        return std::nullopt;
      }
      hit.arrays.emplace(name, std::move(a));
    } catch (const Error& e) {
      *why = e.what();
      return std::nullopt;
    }
  }
  return hit;
}

std::string CachedArrays::build_folder(std::string* note) const {
  std::error_code ec;
  std::filesystem::create_directories(folder_, ec);
  if (!ec && ::access(folder_.c_str(), W_OK) == 0) return folder_;
  const std::string reason = ec ? ec.message() : std::strerror(errno);
  const std::string fallback = fallback_cache_folder();
  std::filesystem::create_directories(fallback, ec);
  OCC_CHECK(!ec && ::access(fallback.c_str(), W_OK) == 0,
            "cannot write the data index cache: {} ({}) nor {} ({}); pass a writable --data-cache-path", folder_,
            reason, fallback, ec ? ec.message() : std::strerror(errno));
  if (note)
    *note = fmt::format("note: the data index cache {} cannot be written ({}); building the indices in {} instead "
                        "(--data-cache-path chooses)",
                        folder_, reason, fallback);
  return fallback;
}

NpyWriter CachedArrays::create(const std::string& folder, const std::string& array, NpyType type,
                               std::vector<int64_t> shape) {
  arrays_[array] = {{"dtype", npy_descr(type)}, {"shape", shape_json(shape)}};
  checksums_.erase(array);
  return NpyWriter(path(folder, array), type, std::move(shape), &checksums_[array]);
}

void CachedArrays::finish(const std::string& folder, nlohmann::json result) {
  for (auto& [name, spec] : arrays_.items()) {
    const auto sum = checksums_.find(name);
    OCC_CHECK(sum != checksums_.end() && sum->second != 0, "internal: cached array {} finished before its commit()", name);
    spec["checksum"] = checksum_text(sum->second);
  }
  const nlohmann::json d = {{"format", kCacheFormat}, {"key", key_}, {"result", std::move(result)}, {"arrays", arrays_}};
  const std::string path = (std::filesystem::path(folder) / (stem_ + "-description.json")).string();
  std::random_device rd;
  const std::string tmp = fmt::format("{}.tmp-{}-{:08x}", path, ::getpid(), rd());
  // The arrays' names on the disk first (their bytes are: NpyWriter::commit), then
  // the description: a set whose description survives a crash has all of its arrays.
  sync_folder(folder);
  write_durably(tmp, d.dump(2) + "\n");
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    fail("cannot rename {} to {}: {}", tmp, path, std::strerror(err));
  }
  sync_folder(folder);
  arrays_ = nlohmann::json::object();
  checksums_.clear();
}

}  // namespace occ
