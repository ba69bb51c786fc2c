#include "train/checkpoint_store.h"

#include <fcntl.h>  // AT_FDCWD; renameat2 comes from <cstdio>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/tensor_file.h"

namespace occ {

namespace fs = std::filesystem;

namespace {

constexpr const char* kMarker = "latest_checkpointed_iteration.txt";

void check_fs(const std::error_code& ec, const char* action, const std::string& path) {
  if (ec) fail("cannot {} {}: {}; check that the checkpoint directory is writable and has free space", action, path, ec.message());
}

bool is_dir(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

void remove_tree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  check_fs(ec, "remove", path);
}

void rename_path(const std::string& from, const std::string& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  if (ec) fail("cannot rename {} to {}: {}; check the checkpoint directory permissions", from, to, ec.message());
}

// Swaps two directories in one step (Linux renameat2). False where the file
// system does not support it; the caller then falls back to rename-aside.
bool exchange_dirs(const std::string& a, const std::string& b) {
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0) return true;
  if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) return false;
  fail("cannot swap {} and {}: {}; check the checkpoint directory permissions", a, b, std::strerror(errno));
}

// Parses "iter_0000100" (any digit count); -1 for anything else (".tmp" etc.).
int64_t parse_iter_name(const std::string& name) {
  if (name.rfind("iter_", 0) != 0 || name.size() <= 5 || name.size() > 5 + 18) return -1;
  int64_t value = -1;
  auto [end, ec] = std::from_chars(name.data() + 5, name.data() + name.size(), value);
  return (ec == std::errc() && end == name.data() + name.size()) ? value : -1;
}

std::string join_iterations(const std::vector<int64_t>& its) {
  if (its.empty()) return "none";
  std::string s;
  for (int64_t it : its) s += (s.empty() ? "" : ", ") + std::to_string(it);
  return s;
}

}  // namespace

std::string shard_dir(const std::string& staging_or_final_dir, int tp_rank, int pp_rank) {
  OCC_CHECK(tp_rank >= 0 && pp_rank >= 0, "checkpoint shard ranks must be non-negative (got tp {}, pp {})", tp_rank, pp_rank);
  return (fs::path(staging_or_final_dir) / fmt::format("mp_rank_{:02d}_{:03d}", tp_rank, pp_rank)).string();
}

std::string make_shard_dir(const std::string& staging_dir, int tp_rank, int pp_rank) {
  OCC_CHECK(is_dir(staging_dir), "checkpoint staging dir {} does not exist; the saving rank must call begin() before the others write", staging_dir);
  std::string dir = shard_dir(staging_dir, tp_rank, pp_rank);
  std::error_code ec;
  fs::create_directory(dir, ec);  // not its parents: a staging dir removed meanwhile (a stop at once) stays removed
  check_fs(ec, "create", dir);
  return dir;
}

CheckpointStore::CheckpointStore(std::string root) : root_(std::move(root)) {
  OCC_CHECK(!root_.empty(), "checkpoint directory is empty; pass a directory path (e.g. --save ckpt)");
}

std::string CheckpointStore::final_dir(int64_t iteration) const {
  OCC_CHECK(iteration >= 0, "checkpoint iteration must be non-negative (got {})", iteration);
  return (fs::path(root_) / fmt::format("iter_{:07d}", iteration)).string();
}

std::string CheckpointStore::marker_path() const { return (fs::path(root_) / kMarker).string(); }

std::string CheckpointStore::begin(int64_t iteration) const {
  const std::string staging = final_dir(iteration) + ".tmp";
  std::error_code ec;
  fs::create_directories(root_, ec);
  check_fs(ec, "create", root_);
  remove_tree(staging);  // leftover of a save that crashed before commit
  fs::create_directory(staging, ec);
  check_fs(ec, "create", staging);
  return staging;
}

void CheckpointStore::abort(int64_t iteration) const { remove_tree(final_dir(iteration) + ".tmp"); }

void CheckpointStore::commit(int64_t iteration) const {
  const std::string final = final_dir(iteration);
  const std::string staging = final + ".tmp";
  const std::string aside = final + ".old";
  OCC_CHECK(is_dir(staging), "checkpoint staging dir {} does not exist; call begin({}) before commit", staging, iteration);

  // Ranks wrote (and fsynced) their own files; syncing here again also covers
  // the directory entries, which a rename alone does not make durable.
  std::error_code ec;
  for (fs::recursive_directory_iterator it(staging, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;
    if (it->is_regular_file(type_ec) || it->is_directory(type_ec)) fsync_path(it->path().string());
  }
  check_fs(ec, "list", staging);
  fsync_path(staging);

  // A crash after a rename-aside re-save left both: the final one is newer.
  if (is_dir(final) && is_dir(aside)) remove_tree(aside);
  if (is_dir(final)) {
    if (exchange_dirs(staging, final)) {
      fsync_path(root_);
      remove_tree(staging);  // now holds the replaced save
    } else {
      // Without an atomic swap, keep the old copy under .old until the new one
      // is in place; iteration_dir() finds it there if we crash in between.
      rename_path(final, aside);
      rename_path(staging, final);
    }
  } else {
    rename_path(staging, final);
  }
  fsync_path(root_);
  if (is_dir(aside)) remove_tree(aside);

  // Last: until the marker names this iteration, loads use the previous one.
  write_file_atomic(marker_path(), std::to_string(iteration) + "\n");
}

std::optional<int64_t> CheckpointStore::latest() const {
  const std::string marker = marker_path();
  std::error_code ec;
  if (!fs::exists(marker, ec)) return std::nullopt;
  std::ifstream in(marker, std::ios::binary);
  OCC_CHECK(in.good(), "cannot read checkpoint marker {}; check its permissions", marker);
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  const auto first = text.find_first_not_of(" \t\r\n");
  const auto last = text.find_last_not_of(" \t\r\n");
  const std::string trimmed = first == std::string::npos ? "" : text.substr(first, last - first + 1);

  int64_t value = -1;
  auto [end, perr] = std::from_chars(trimmed.data(), trimmed.data() + trimmed.size(), value);
  if (trimmed.empty() || perr != std::errc() || end != trimmed.data() + trimmed.size() || value < 0) {
    std::string shown = trimmed.substr(0, 32);
    for (char& c : shown) c = (c >= 32 && c < 127) ? c : '?';
    fail("checkpoint marker {} holds '{}', not an iteration number; write the iteration to resume from (saved: {}) or delete it to start fresh",
         marker, shown, join_iterations(iterations()));
  }
  return value;
}

std::string CheckpointStore::iteration_dir(int64_t iteration) const {
  const std::string final = final_dir(iteration);
  if (is_dir(final)) return final;
  // A crash in the middle of a rename-aside re-save leaves the old copy here.
  if (is_dir(final + ".old")) return final + ".old";
  fail("checkpoint {} does not exist; load a saved iteration (saved: {}) or check the --load directory",
       final, join_iterations(iterations()));
}

std::vector<int64_t> CheckpointStore::iterations() const {
  std::vector<int64_t> out;
  std::error_code ec;
  if (!fs::is_directory(root_, ec)) return out;
  for (fs::directory_iterator it(root_, ec), end; !ec && it != end; it.increment(ec)) {
    const int64_t value = parse_iter_name(it->path().filename().string());
    std::error_code dir_ec;
    if (value >= 0 && it->is_directory(dir_ec)) out.push_back(value);
  }
  check_fs(ec, "list", root_);
  std::sort(out.begin(), out.end());
  return out;
}

void CheckpointStore::keep_last(int n) const {
  OCC_CHECK(n >= 1, "cannot keep the last {} checkpoints; pass a positive number", n);
  const std::optional<int64_t> current = latest();
  if (!current) return;  // nothing committed: nothing is known to be old
  // Called after a commit, so the marker names the newest save of this run: a
  // directory beyond it belongs to a timeline abandoned by a resume from an
  // earlier checkpoint (--ckpt-step, or the supervisor's fallback), which no
  // plain resume ever picks (choose_resume_checkpoint stops at the marker);
  // it goes too. Of those up to the marker, the n most recent stay.
  std::vector<int64_t> kept, doomed;
  for (int64_t it : iterations()) (it > *current ? doomed : kept).push_back(it);
  const size_t drop = kept.size() > static_cast<size_t>(n) ? kept.size() - static_cast<size_t>(n) : 0;
  for (size_t i = 0; i < drop; ++i)
    if (kept[i] != *current) doomed.push_back(kept[i]);
  for (int64_t it : doomed) {
    // Rename first: a crash mid-delete must not leave a partial dir that still
    // looks like a committed iteration.
    const std::string dir = final_dir(it);
    const std::string removing = dir + ".del";
    remove_tree(removing);
    rename_path(dir, removing);
    remove_tree(removing);
  }
}

}  // namespace occ
