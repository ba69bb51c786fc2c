#include "train/output_paths.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

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

// The path with '.', '..' and symbolic links of its existing part resolved (a
// symbolic link at the end that points nowhere yet too: writing through it
// creates its target).
std::string resolved(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  for (int hops = 0; hops < 40 && fs::is_symlink(p, ec) && !fs::exists(p, ec); ++hops) {
    const fs::path target = fs::read_symlink(p, ec);
    if (ec) break;
    p = target.is_absolute() ? target : p.parent_path() / target;
  }
  p = fs::weakly_canonical(p, ec);
  if (ec) return fs::absolute(path).lexically_normal().string();
  std::string s = p.string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// An existing file's identity (device, inode); nullopt for a path that does not exist.
std::optional<std::pair<dev_t, ino_t>> file_id(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return std::pair{st.st_dev, st.st_ino};
}

// Whether `path` (resolved) is `dir` (resolved) or lies below it.
bool within(const std::string& path, const std::string& dir) {
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
                         (dir == "/" || path[dir.size()] == '/'));
}

constexpr const char* kMarkerName = "latest_checkpointed_iteration.txt";

// Whether `path` (resolved) is one of checkpoint root's files: its marker or its
// iter_* directories (committed or staging) and anything below them.
bool in_checkpoint(const std::string& path, const std::string& root) {
  if (!within(path, root) || path == root) return false;
  const std::string rel = path.substr(root == "/" ? 1 : root.size() + 1);
  const std::string first = rel.substr(0, rel.find('/'));
  return rel == kMarkerName || first.rfind("iter_", 0) == 0;
}

// The existing regular files below `dir` (those of a checkpoint only, when `checkpoint`), by identity.
std::map<std::pair<dev_t, ino_t>, std::string> files_below(const std::string& dir, bool checkpoint) {
  std::map<std::pair<dev_t, ino_t>, std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (checkpoint && it.depth() == 0 && name != kMarkerName && name.rfind("iter_", 0) != 0) {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file(ec)) continue;
    if (auto id = file_id(it->path().string())) out.emplace(*id, it->path().string());
  }
  return out;
}

// The files the command line itself read (--config), registered by its parser.
std::vector<std::pair<const char*, std::string>>& command_line_inputs() {
  static std::vector<std::pair<const char*, std::string>> inputs;
  return inputs;
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

void OutputPaths::file(const char* flag, const std::string& path) { entries_.push_back({flag, path, Kind::File, "", ""}); }
void OutputPaths::dir(const char* flag, const std::string& path, const std::string& deepest) {
  entries_.push_back({flag, path, Kind::Dir, deepest, ""});
}
void OutputPaths::checkpoint_output(const char* flag, const std::string& root, const std::string& deepest) {
  entries_.push_back({flag, root, Kind::SaveRoot, deepest, ""});
}
void OutputPaths::inside(const char* flag, const std::string& path) {
  entries_.push_back({flag, path, Kind::Inside, "", ""});
}
void OutputPaths::input(const char* flag, const std::string& path, const std::string& what) {
  entries_.push_back({flag, path, Kind::Input, "", what});
}
void OutputPaths::input_dir(const char* flag, const std::string& dir) {
  entries_.push_back({flag, dir, Kind::InputDir, "", ""});
}
void OutputPaths::checkpoint_input(const char* flag, const std::string& root) {
  entries_.push_back({flag, root, Kind::LoadRoot, "", ""});
}

void OutputPaths::tokenizer_inputs(const TokenizerSpec& flags, const TokenizerSpec& recorded, const std::string& load) {
  for (const auto& [flag, path] : {std::pair{"--tokenizer-model", flags.model}, std::pair{"--vocab-file", flags.vocab_file},
                                   std::pair{"--merge-file", flags.merge_file}})
    if (!path.empty()) input(flag, path);
  for (const std::string& path : {recorded.model, recorded.vocab_file, recorded.merge_file})
    if (!path.empty()) input("--load", path, fmt::format("{}, the tokenizer file checkpoint --load {} records", path, load));
}

void OutputPaths::command_line_input(const char* flag, const std::string& path) {
  command_line_inputs().emplace_back(flag, path);
}

void OutputPaths::check_collisions(const std::vector<Entry>& entries) {
  // How a message names an entry: "--out x.safetensors", "--hf-gpt2's hx/config.json".
  auto named = [](const Entry& e) {
    if (!e.what.empty()) return e.what;
    return e.kind == Kind::Inside ? fmt::format("{}'s {}", e.flag, e.path) : fmt::format("{} {}", e.flag, e.path);
  };
  auto own_path = [](const Entry& e) { return fmt::format("give {} a path of its own", e.flag); };
  std::vector<std::string> where(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) where[i] = resolved(entries[i].path);
  // The files the directories read hold, by identity (a hard link is found under any name).
  std::vector<std::map<std::pair<dev_t, ino_t>, std::string>> held(entries.size());
  for (size_t i = 0; i < entries.size(); ++i)
    if (entries[i].kind == Kind::InputDir || entries[i].kind == Kind::LoadRoot)
      held[i] = files_below(entries[i].path, entries[i].kind == Kind::LoadRoot);

  for (size_t a = 0; a < entries.size(); ++a) {
    const Entry& out = entries[a];
    if (!out.output()) continue;
    const bool writes_file = out.kind == Kind::File || out.kind == Kind::Inside;
    const auto id = writes_file ? file_id(out.path) : std::nullopt;
    for (size_t b = 0; b < entries.size(); ++b) {
      if (a == b) continue;
      const Entry& other = entries[b];
      if (other.output()) {
        if (b < a) continue;  // each pair of outputs once
        if (where[a] == where[b] || (writes_file && id && (other.kind == Kind::File || other.kind == Kind::Inside) &&
                                     id == file_id(other.path)))
          fail("{} is the same {} as {} (one would overwrite the other); give each its own path", named(out),
               where[a] == where[b] ? "path" : "file (a hard link)", named(other));
        // A path among the checkpoint files a save writes (its marker, its iter_* directories).
        for (const auto& [x, xi, root, ri] : {std::tuple{&out, a, &other, b}, std::tuple{&other, b, &out, a}})
          if (root->kind == Kind::SaveRoot && x->kind != Kind::SaveRoot && in_checkpoint(where[xi], where[ri]))
            fail("{} is among the checkpoint files {} {} writes (its {} and iter_* directories); give {} a path "
                 "outside them", named(*x), root->flag, root->path, kMarkerName, x->flag);
        continue;
      }
      switch (other.kind) {
        case Kind::Input:
          if (where[a] == where[b])
            fail("{} is the same path as {}, which this command reads; give each its own path", named(out),
                 named(other));
          if (id && id == file_id(other.path))
            fail("{} is the same file as {} (a hard link to it), which this command reads; {}", named(out),
                 named(other), own_path(out));
          break;
        case Kind::InputDir:
          if (where[a] == where[b] && out.kind != Kind::Inside)
            fail("{} is the same path as {}, which this command reads; give each its own path", named(out),
                 named(other));
          if (writes_file && within(where[a], where[b]))
            fail("{} is inside {}, whose files this command reads; give {} a path outside it", named(out),
                 named(other), out.flag);
          if (id && held[b].count(*id))
            fail("{} is the same file as {} (a hard link to it), which this command reads ({}); {}", named(out),
                 held[b].at(*id), named(other), own_path(out));
          break;
        case Kind::LoadRoot:
          if (out.kind == Kind::SaveRoot && where[a] == where[b]) break;  // --save X --load X: a resume
          if (in_checkpoint(where[a], where[b]))
            fail("{} is a file of checkpoint {} (its {} or an iter_* directory), which this command reads; give {} "
                 "a path outside the checkpoint's files", named(out), named(other), kMarkerName, out.flag);
          if (id && held[b].count(*id))
            fail("{} is the same file as {}, a file of checkpoint {} (a hard link to it), which this command reads; "
                 "{}", named(out), held[b].at(*id), named(other), own_path(out));
          if (out.kind == Kind::SaveRoot && in_checkpoint(where[b], where[a]))
            fail("{} is inside {}'s checkpoint files; give {} a directory of its own", named(other), named(out),
                 other.flag);
          break;
        default:
          break;
      }
    }
  }
}

void OutputPaths::check(int rank) const {
  for (const Entry& e : entries_) OCC_CHECK(!e.path.empty(), "{} is an empty string; give a path", e.flag);
  // Before anything is created: no output overwrites another, nor what the command reads.
  std::vector<Entry> all = entries_;
  for (const auto& [flag, path] : command_line_inputs()) all.push_back({flag, path, Kind::Input, "", ""});
  check_collisions(all);
  // Directories first (a file may be written in one), all undone when a check fails.
  std::vector<fs::path> created;  // the levels that did not exist, outermost first
  try {
    for (const Entry& e : entries_) {
      if (e.kind != Kind::Dir && e.kind != Kind::SaveRoot) continue;
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
