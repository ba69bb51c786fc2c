#pragma once
// Whether a committed checkpoint can be resumed from, and the newest one that
// can: what `optimus-cc launch` restarts from when the latest is damaged on
// disk (a plain --load of a damaged checkpoint keeps failing loudly).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace occ {

// What keeps checkpoint `iteration` under root from loading: whatever
// verify_checkpoint (train/checkpoint.h) finds in its files' headers (a shard
// missing, a file of another save), then any file whose header or tensors fail
// their CRCs. "" when it verifies, else the first problem (one line). Reads
// every byte: as long as a load.
std::string checkpoint_problem(const std::string& root, int64_t iteration);

struct ResumeChoice {
  std::optional<int64_t> iteration;  // the checkpoint to resume from (none: start afresh / nothing verifies)
  std::optional<int64_t> latest;     // what the marker names (none: no marker, or an unreadable one)
  // The newer checkpoints passed over, newest first, with why.
  std::vector<std::pair<int64_t, std::string>> refused;
  std::string marker_problem;        // why the marker could not be read ("" when it could)
};

// The newest committed checkpoint at or below the marker's iteration that
// verifies (with an unreadable marker: the newest of all that verifies). A
// directory beyond the marker's iteration is never chosen: the marker is
// rewritten last in a commit, so such a save was not finished, or belongs to
// a run that has since resumed from an earlier one.
ResumeChoice choose_resume_checkpoint(const std::string& root);

}  // namespace occ
