#pragma once
// The command `optimus-cc launch` supervises: any launcher (mpirun, srun, or
// none) around one `optimus-cc train FLAGS`. Its train flags are parsed as
// train parses them (--config included), so a bad flag is refused before
// anything starts and the supervisor knows --save; each attempt runs the
// user's command with flags appended to the train part (a flag given twice
// takes its last value): where to resume, and the heartbeat directory.
#include <cstdint>
#include <string>
#include <vector>

#include "train/options.h"

namespace occ::cmd {

class JobCommand {
 public:
  // Throws UsageError: no `optimus-cc train` in argv, or a bad train flag.
  explicit JobCommand(std::vector<std::string> argv);

  const TrainOptions& options() const { return opt_; }

  struct Attempt {
    std::string load;        // --load ("": the user's own, if any)
    int64_t ckpt_step = -1;  // --ckpt-step (< 0: none, the latest)
    bool resumes = false;    // from the job's own --save: turns the user's --finetune, --no-load-optim off
    std::string heartbeat_dir;
  };
  std::vector<std::string> argv_for(const Attempt& attempt) const;

 private:
  std::vector<std::string> argv_;
  size_t train_begin_ = 0, train_end_ = 0;  // the train flags: argv_[train_begin_, train_end_)
  TrainOptions opt_;
};

}  // namespace occ::cmd
