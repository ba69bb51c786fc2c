#pragma once
// The command-line front of `optimus-cc launch` (launch.cpp holds the
// supervisor): the words before "--", and what a refused or failed start must
// not leave behind.
#include <filesystem>
#include <string>
#include <vector>

namespace occ::cmd {

// Everything before "--" must be launch's own flags: a job's command there (the
// "--" forgotten) or an unknown option is one UsageError line naming the word and
// the fix, rather than CLI11's list of stray words.
void refuse_words_before_split(int split, int argc, char** argv);

// The directories the supervisor makes (the heartbeat directory, SAVE for its
// lock, and their parents where they did not exist): removed again, with the
// heartbeat files, when the job wrote no checkpoint (a refused or failed start).
// After a checkpoint they stay. Construct before anything is created; it acts
// when destroyed, unless dismissed (the folder turned out to be another
// supervisor's: a refused lock).
class MadeDirectories {
 public:
  MadeDirectories(const std::string& heartbeat_dir, std::string save);
  ~MadeDirectories();
  MadeDirectories(const MadeDirectories&) = delete;
  MadeDirectories& operator=(const MadeDirectories&) = delete;
  void dismiss() { made_.clear(); }

 private:
  std::string save_;
  std::vector<std::filesystem::path> made_;  // the heartbeat directory first, then its parents
};

}  // namespace occ::cmd
