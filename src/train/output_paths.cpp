#include "train/output_paths.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"

namespace occ {
namespace {

namespace fs = std::filesystem;

// Creates `probe` exclusively, writes a byte and removes it; the errno of the first failure, 0 on success.
int probe_write(const std::string& probe) {
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  int err = ::write(fd, "x", 1) == 1 ? 0 : errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (::unlink(probe.c_str()) != 0 && err == 0) err = errno;
  return err;
}

// The path with '.', '..' and symbolic links of its existing part resolved.
std::string resolved(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) return fs::absolute(path).lexically_normal().string();
  std::string s = p.string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

}  // namespace

void check_writable_dir(const std::string& dir, const char* flag, int rank) {
  OCC_CHECK(!dir.empty(), "{} is an empty string; give a directory", flag);
  // "--save directory DIR", "--tensorboard-dir DIR"
  const std::string what = std::string(flag).ends_with("-dir") ? flag : std::string(flag) + " directory";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  OCC_CHECK(!ec, "cannot create {} {}: {}; give a directory that can be created and written", what, dir, ec.message());
  const std::string probe = fmt::format("{}/.occ-write-probe.rank{}.{}", dir, rank, int64_t(getpid()));
  const int err = probe_write(probe);
  OCC_CHECK(err == 0, "cannot write in {} {}: {} (a probe file failed); give a directory that can be written", what,
            dir, std::strerror(err));
}

void check_writable_file(const std::string& path, const char* flag) {
  OCC_CHECK(!path.empty(), "{} is an empty string; give a file name", flag);
  std::error_code ec;
  OCC_CHECK(!fs::is_directory(path, ec),
            "{} {} is an existing directory, not a file; give a file name (e.g. {}/{})", flag, path,
            path.back() == '/' ? path.substr(0, path.size() - 1) : path,
            std::string(flag) == "--trace" ? "trace.json" : "out");
  // The probe: beside the file, a name as long as the file's own (plus its ".tmp").
  const fs::path p(path);
  std::string name = fmt::format(".occ-probe.{}.", int64_t(getpid()));
  const size_t want = p.filename().string().size() + 4;
  if (name.size() < want) name.append(want - name.size(), 'p');
  const std::string probe = (p.parent_path() / name).string();
  const int err = probe_write(probe);
  OCC_CHECK(err == 0, "cannot write {} file {}: {} (a probe file beside it failed); give a path in an existing, "
            "writable directory", flag, path, std::strerror(err));
}

void check_writable_depth(const std::string& dir, const std::string& below, const char* flag, int rank) {
  // Directories as deep and names as long as `below`'s, each component a probe of
  // its own length (the first carries the rank and pid, so that ranks never meet).
  std::vector<std::string> parts;
  for (const auto& part : fs::path(below)) parts.push_back(part.string());
  if (parts.empty()) return;
  std::string top = fmt::format(".p{}.{}", rank, int64_t(getpid()));
  if (top.size() < parts[0].size()) top.append(parts[0].size() - top.size(), 'p');
  fs::path at = fs::path(dir) / top;
  for (size_t i = 1; i + 1 < parts.size(); ++i) at /= std::string(parts[i].size(), 'd');
  std::error_code ec;
  int err = 0;
  if (parts.size() == 1) {
    err = probe_write(at.string());
  } else {
    fs::create_directories(at, ec);
    err = ec ? ec.value() : probe_write((at / std::string(parts.back().size(), 'f')).string());
  }
  fs::remove_all(fs::path(dir) / top, ec);
  OCC_CHECK(err == 0,
            "cannot write below {} directory {}: {} (a probe of the {}-character paths written there, such as "
            "{}/{}, failed); give a shorter or writable directory",
            flag, printable(dir, 80), std::strerror(err), dir.size() + 1 + below.size(), printable(dir, 40), below);
}

void OutputPaths::file(const char* flag, const std::string& path) { entries_.push_back({flag, path, Kind::File, ""}); }
void OutputPaths::dir(const char* flag, const std::string& path, const std::string& deepest) {
  entries_.push_back({flag, path, Kind::Dir, deepest});
}
void OutputPaths::input(const char* flag, const std::string& path) { entries_.push_back({flag, path, Kind::Input, ""}); }
void OutputPaths::inside(const char* flag, const std::string& path) { entries_.push_back({flag, path, Kind::Inside, ""}); }

void OutputPaths::check(int rank) const {
  for (const Entry& e : entries_) OCC_CHECK(!e.path.empty(), "{} is an empty string; give a path", e.flag);
  // No two outputs (nor an output and an input) the same path: one would silently
  // overwrite the other.
  for (size_t a = 0; a < entries_.size(); ++a)
    for (size_t b = a + 1; b < entries_.size(); ++b) {
      const Entry &x = entries_[a], &y = entries_[b];
      if (x.kind == Kind::Input && y.kind == Kind::Input) continue;
      if (resolved(x.path) != resolved(y.path)) continue;
      const Entry& out = x.kind == Kind::Input ? y : x;
      const Entry& other = x.kind == Kind::Input ? x : y;
      fail("{} {} is the same path as {} {}{}; give each its own path", out.flag, out.path, other.flag, other.path,
           other.kind == Kind::Input ? ", which this command reads" : " (one would overwrite the other)");
    }
  // Directories first (a file may be written in one), all undone when a check fails.
  std::vector<fs::path> created;  // the levels that did not exist, outermost first
  try {
    for (const Entry& e : entries_) {
      if (e.kind != Kind::Dir) continue;
      std::vector<fs::path> missing;
      std::error_code ec;
      for (fs::path p = fs::absolute(e.path, ec); !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
        missing.push_back(p);
        if (p == p.parent_path()) break;
      }
      created.insert(created.end(), missing.rbegin(), missing.rend());
      check_writable_dir(e.path, e.flag, rank);
      if (!e.deepest.empty()) check_writable_depth(e.path, e.deepest, e.flag, rank);
    }
    for (const Entry& e : entries_)
      if (e.kind == Kind::File) check_writable_file(e.path, e.flag);
  } catch (...) {
    std::error_code ec;
    for (auto it = created.rbegin(); it != created.rend(); ++it) fs::remove(*it, ec);  // empty ones only
    throw;
  }
}

}  // namespace occ
