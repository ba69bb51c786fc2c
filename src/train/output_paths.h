#pragma once
// Where a command writes, checked before its first write (on every rank that writes
// there), so that a typo in --save, --trace or --out fails at once instead of after
// the work it would hold (a multi-day run would otherwise lose its checkpoints).
// Each check throws a one-line occ::Error naming the flag, the path and the reason.
#include <cstdint>
#include <string>
#include <vector>

namespace occ {

// DIR can be created (with its parents) and a file written in it: a probe file
// (named after `rank`, so ranks sharing the folder do not meet) is created and removed.
void check_writable_dir(const std::string& dir, const char* flag, int rank);
// A file can be created at FILE: it is not an existing directory, and a probe file
// beside it (as long a name) is created and removed; FILE itself is left alone.
void check_writable_file(const std::string& path, const char* flag);
// The deepest path a command will write below DIR (`below`, relative, e.g.
// "iter_0000100.tmp/mp_rank_00_000/model_optim_rng.bin.tmp") can be created: a
// probe of exactly its length and depth is created and removed, so that a DIR too
// long for the paths written under it fails now rather than at the first save.
void check_writable_depth(const std::string& dir, const std::string& below, const char* flag, int rank);

// The outputs of one command, checked together: no path empty, each writable (as
// above), and no two of them, nor an output and an input the command reads, the
// same file or directory (after resolving '.', '..' and symbolic links).
class OutputPaths {
 public:
  void file(const char* flag, const std::string& path);  // a file the command writes
  // A directory it creates or writes in; `deepest`: the longest path it writes
  // below it (check_writable_depth), if any.
  void dir(const char* flag, const std::string& path, const std::string& deepest = "");
  void input(const char* flag, const std::string& path);  // a file it reads (never to be overwritten)
  // A file it writes inside one of its directories: checked against the others' paths only.
  void inside(const char* flag, const std::string& path);
  // Throws on the first problem. Creates the directories (all of them, or, when a
  // check fails, none: those it created are removed again).
  void check(int rank = 0) const;

 private:
  enum class Kind { File, Dir, Input, Inside };
  struct Entry {
    const char* flag;
    std::string path;
    Kind kind;
    std::string deepest;
  };
  std::vector<Entry> entries_;
};

}  // namespace occ
