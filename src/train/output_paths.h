#pragma once
// Where a command writes, checked before its first write (on every rank that writes
// there), so that a typo in --save, --trace or --out fails at once instead of after
// the work it would hold (a multi-day run would otherwise lose its checkpoints).
// Each check throws a one-line occ::Error naming the flag, the path and the reason.
#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"

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

// The outputs and inputs of one command, checked together, the one rule every
// command that writes files follows: no output path empty, each writable (as
// above), and no output the same file as another output of the command nor as
// anything the command reads. Paths are compared after resolving '.', '..' and
// symbolic links, and existing files also by device and inode (a hard link is the
// same file under another name). A checkpoint's files are its marker and
// everything under its iter_* directories: an output there is refused whichever
// iteration the command reads, since any of them is a checkpoint a later run loads.
class OutputPaths {
 public:
  void file(const char* flag, const std::string& path);  // a file the command writes
  // A directory it creates or writes in; `deepest`: the longest path it writes
  // below it (check_writable_depth), if any.
  void dir(const char* flag, const std::string& path, const std::string& deepest = "");
  // A checkpoint directory it saves into (train --save, import-hf --save): a
  // directory as dir(), whose marker and iter_* entries are its outputs.
  void checkpoint_output(const char* flag, const std::string& root, const std::string& deepest = "");
  // A file it writes inside one of its directories (`flag`: that directory's flag).
  void inside(const char* flag, const std::string& path);

  // A file it reads (never to be overwritten). `what`, when given, describes it in
  // messages instead of the flag ("the tokenizer checkpoint --load ck records").
  void input(const char* flag, const std::string& path, const std::string& what = "");
  // A directory all of whose files it reads (import-hf --input).
  void input_dir(const char* flag, const std::string& dir);
  // A checkpoint directory it reads (--load): its marker and iter_* files. The same
  // directory as a checkpoint_output() is the resume pattern (--save X --load X), allowed.
  void checkpoint_input(const char* flag, const std::string& root);

  // The tokenizer files it reads: those its flags name, and those the checkpoint it
  // loads (`load`) records (`recorded`: a later run of that checkpoint reads them).
  void tokenizer_inputs(const TokenizerSpec& flags, const TokenizerSpec& recorded = {}, const std::string& load = "");

  // A file the command line itself read (--config FILE): an input of every OutputPaths
  // this process checks (registered once, by the command-line parser).
  static void command_line_input(const char* flag, const std::string& path);

  // Throws on the first problem. Creates the directories (all of them, or, when a
  // check fails, none: those it created are removed again).
  void check(int rank = 0) const;

 private:
  enum class Kind { File, Dir, SaveRoot, Inside, Input, InputDir, LoadRoot };
  struct Entry {
    const char* flag;
    std::string path;
    Kind kind;
    std::string deepest;  // Dir, SaveRoot
    std::string what;     // Input: a description for messages ("" -> "FLAG PATH")
    bool output() const { return kind == Kind::File || kind == Kind::Dir || kind == Kind::SaveRoot || kind == Kind::Inside; }
  };
  static void check_collisions(const std::vector<Entry>& entries);
  std::vector<Entry> entries_;
};

}  // namespace occ
