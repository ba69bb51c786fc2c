#pragma once
// Where a run writes, checked at start-up on every rank that writes there, so that
// a typo in --save, --tensorboard-dir or --trace fails before the first iteration
// instead of after it (a multi-day run would otherwise lose its checkpoints).
// Each check throws a one-line occ::Error naming the flag, the path and the reason.
#include <string>

namespace occ {

// DIR can be created (with its parents) and a file written in it: a probe file
// (named after `rank`, so ranks sharing the folder do not meet) is created and removed.
void check_writable_dir(const std::string& dir, const char* flag, int rank);
// A file can be created next to FILE (its folder exists and is writable): a probe
// file beside it is created and removed; FILE itself is left alone.
void check_writable_file(const std::string& path, const char* flag);

}  // namespace occ
