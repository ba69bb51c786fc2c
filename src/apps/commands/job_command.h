#pragma once
// The command `optimus-cc launch` supervises: any launcher (mpirun, srun, or
// none) around one `optimus-cc train FLAGS`. Its train flags are parsed as
// train parses them (--config included), so a bad flag is refused before
// anything starts and the supervisor knows --save; each attempt runs the
// user's command with flags appended to the train part (a flag given twice
// takes its last value): where to resume, the heartbeat directory and the
// supervisor's lock token.
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
    // From the job's own --save: --load `load` --ckpt-step `ckpt_step` in place of the
    // user's --load and --ckpt-step (where the run began), and the user's --finetune,
    // --no-load-optim off. Otherwise the user's own flags.
    bool resumes = false;
    std::string load;
    int64_t ckpt_step = -1;
    std::string heartbeat_dir;
    std::string run_lock_token;  // the supervisor's lock on --save (train/run_lock.h)
  };
  std::vector<std::string> argv_for(const Attempt& attempt) const;

 private:
  std::vector<std::string> argv_;
  size_t train_begin_ = 0, train_end_ = 0;  // the train flags: argv_[train_begin_, train_end_)
  TrainOptions opt_;
};

}  // namespace occ::cmd
