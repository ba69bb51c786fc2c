#pragma once
// The data index cache (--data-cache-path): a dataset's indices are built once
// per job (data/training_data.h says by whom) and mapped read-only by every
// rank. As Megatron's, a set of indices is a few .npy files named
// "<hash>-<Kind>-<split>-<array>.npy" beside "<hash>-<Kind>-<split>-description.json",
// which is written last: a set without it was never finished. The hash is of
// the description's key, everything the indices depend on (the flags that
// shape them and the .idx file's size and modification time), so a changed
// dataset or flag misses the cache rather than reading indices built for
// something else; the key is compared in full on every hit. Every array's
// dtype, shape and checksum (XXH64 of the file, computed as it is committed)
// are recorded and checked against its file on every hit: a truncated,
// foreign or damaged file is a miss, and the set is built again (into new
// files renamed over the old: a rank that still maps the old ones keeps them).
// Durability: each array is flushed to the disk before it is renamed into
// place, the folder before the description is written, and the description
// before it is renamed, so a crash at any point leaves either a complete set
// or one without a description (a miss), never a description over arrays
// that did not reach the disk.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/npy_file.h"

namespace occ {

// Megatron's default folder for the indices of the dataset at `prefix`
// (GPTDataset: os.path.join(path_prefix, "cache", "GPTDataset_indices")).
std::string default_cache_folder(const std::string& prefix);
// Where to build when the chosen folder cannot be written: a folder of the
// system's temporary directory.
std::string fallback_cache_folder();

// The bytes free for this user in `folder` (-1: unknown).
int64_t free_bytes(const std::string& folder);
// A size for messages, in the unit that shows it: "512 B", "1.50 KiB", "23.4 MiB", "118 GiB".
std::string size_text(int64_t bytes);

// "<size>:<mtime in ns>" of a file: what tells one version of a dataset from another.
std::string file_version(const std::string& path);

class CachedArrays {
 public:
  // `kind` and `split` name the files as Megatron does ("GPTDataset", "train").
  CachedArrays(std::string folder, std::string kind, std::string split, nlohmann::json key);

  struct Hit {
    std::string folder;
    nlohmann::json result;                 // what the builder recorded beside the arrays
    std::map<std::string, NpyArray> arrays;  // mapped read-only
  };
  // A complete set whose key equals ours, in the chosen folder or the fallback
  // one; otherwise none, and `why` says what was found. verify: check every
  // array's checksum (a pass over its bytes); the ranks that only map a set
  // their node's builder has just found or built skip it (training_data.h).
  std::optional<Hit> find(std::string* why = nullptr, bool verify = true) const;

  // The folder to build into: the chosen one if it can be created and written,
  // else the fallback (`note` then says so in one line).
  std::string build_folder(std::string* note) const;
  std::string path(const std::string& folder, const std::string& array) const;
  // A new array of the set, to fill and commit() before finish().
  NpyWriter create(const std::string& folder, const std::string& array, NpyType type, std::vector<int64_t> shape);
  // Records the set as complete: the description (key, result and the arrays
  // created), written atomically.
  void finish(const std::string& folder, nlohmann::json result);

  const std::string& stem() const { return stem_; }
  const nlohmann::json& key() const { return key_; }

 private:
  std::optional<Hit> find_in(const std::string& folder, std::string* why, bool verify) const;

  std::string folder_, stem_;
  nlohmann::json key_;
  nlohmann::json arrays_ = nlohmann::json::object();  // created so far: name -> {"dtype", "shape"}
  std::map<std::string, uint64_t> checksums_;          // their checksums, stored by NpyWriter::commit()
};

}  // namespace occ
