#pragma once
// Directory layout and atomic commit protocol of sharded checkpoints
// (Megatron-like):
//   ROOT/iter_0000100/mp_rank_TT_PPP/...      files written by the ranks
//   ROOT/latest_checkpointed_iteration.txt    "100": the newest committed one
// A save goes to ROOT/iter_0000100.tmp and becomes visible only through one
// rename, and the marker is rewritten after that, so a crash at any point
// leaves the previous checkpoint loadable. Leftover *.tmp dirs are never read.
//
// Protocol (the caller owns the barriers):
//   one process: staging = store.begin(it);         -> barrier
//   every writer: files into make_shard_dir(staging, tp, pp) -> barrier
//   one process: store.commit(it); store.keep_last(n);
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace occ {

// The file of model, optimizer and RNG state in each shard directory (Megatron's name).
inline constexpr const char* kShardStateFile = "model_optim_rng.bin";

// DIR/mp_rank_TT_PPP (TT: tensor-parallel rank, PPP: pipeline rank); pure.
std::string shard_dir(const std::string& staging_or_final_dir, int tp_rank, int pp_rank);
// The same, created (with parents) if missing.
std::string make_shard_dir(const std::string& staging_dir, int tp_rank, int pp_rank);

class CheckpointStore {
 public:
  explicit CheckpointStore(std::string root);

  const std::string& root() const { return root_; }

  // Creates ROOT (if needed) and an empty staging dir ROOT/iter_XXXXXXX.tmp,
  // first removing any leftover of a crashed save; returns the staging dir.
  std::string begin(int64_t iteration) const;

  // Makes the staged iteration durable and current: fsyncs everything staged,
  // renames staging -> final (replacing an earlier save of the same iteration
  // without ever leaving neither), fsyncs ROOT, then rewrites the marker.
  void commit(int64_t iteration) const;

  // Removes the staging dir of a save that failed (begin() would remove it too).
  void abort(int64_t iteration) const;

  // The iteration named by the marker; nullopt when there is no marker.
  std::optional<int64_t> latest() const;

  // The committed dir of `iteration`; fails with a one-line error if missing.
  std::string iteration_dir(int64_t iteration) const;

  // Committed iterations present under ROOT, ascending (staging dirs excluded).
  std::vector<int64_t> iterations() const;

  // After a commit (--keep-last): deletes committed iterations older than the
  // n most recent at or below the marker's, and every one beyond it (a branch
  // abandoned by a resume from an earlier checkpoint: never resumed again);
  // never the one the marker names.
  void keep_last(int n) const;

 private:
  std::string final_dir(int64_t iteration) const;
  std::string marker_path() const;

  std::string root_;
};

}  // namespace occ
