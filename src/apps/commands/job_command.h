#pragma once
// The command `optimus-cc launch` supervises: any launcher (mpirun, srun, or
// none) around one `optimus-cc train FLAGS`, directly or inside `sh -c STRING`
// (bash, dash...). The program is this optimus-cc when it is named optimus-cc
// or resolves (a path, or a PATH lookup) to this very binary (a symlink, a
// copy's hard link). Its train flags are parsed and validated as train does
// (--config included; the layout from the launcher's -np / -n when it gives
// one), so a bad flag is refused before anything starts and the supervisor
// knows --save. Each attempt runs the user's command with flags added after
// the train flags (a flag given twice takes its last value): where to resume,
// the heartbeat directory and the supervisor's lock token; inside a `sh -c`
// string they are added there, quoted, and the train command's simple command
// is made to `exec`, so that the supervisor's signals and the exit status are
// the launcher's, not the shell's.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "train/options.h"

namespace occ::cmd {

class JobCommand {
 public:
  // Throws UsageError: no `optimus-cc train` in argv, a form the supervisor
  // cannot drive safely, or a bad train flag.
  explicit JobCommand(std::vector<std::string> argv);

  // The train flags as parsed, with --save and --load resolved (resolve()).
  const TrainOptions& options() const { return opt_; }

  // A path of the train command made absolute as its ranks resolve it: against
  // the launcher's working-directory flag (mpirun -wdir / --wdir / -wd, srun
  // --chdir / -D) and the `cd DIR`s before the train command in a sh -c string,
  // else this process's working directory. Every path the supervisor itself
  // opens goes through here. Throws UsageError for a relative path where that
  // directory is not known (a cd $VAR), naming `flag`.
  std::string resolve(const std::string& path, const std::string& flag = "") const;

  // The ranks the launcher starts, where its flags say (mpirun -np N, srun -n N;
  // 1 with no launcher); nullopt where they do not.
  std::optional<int> world_size() const { return world_size_; }

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
  // What the words before the program say about where and how many ranks run.
  struct Place {
    std::optional<std::string> dir;  // the job's working directory (nullopt: not known here)
    std::string dir_unknown_why;
    std::optional<int> world;        // from a launcher's -np
    bool launcher = false;
    bool wrapped = false;            // some other program runs before optimus-cc (world unknown)
    bool several_programs = false;   // an MPMD launch (":"): the world is not this command's alone
  };
  void read_prefix(const std::vector<std::string>& words, Place& place) const;
  bool names_this_program(const std::string& word, const Place& place) const;
  bool find_direct(bool found_in_shell);
  bool find_in_shell();
  void parse_train_flags();
  void validate_train_flags() const;
  // The user's command with `flags` after its train flags, and (the direct form) without
  // the train flags named in `dropped` (with their values).
  std::vector<std::string> with_train_flags(const std::vector<std::string>& flags,
                                            const std::vector<std::string>& dropped = {}) const;

  std::vector<std::string> argv_;
  std::vector<std::string> train_flags_;  // the words after `optimus-cc train`
  size_t train_end_ = 0;                  // the direct form: where the train flags end in argv_
  // The sh -c form: argv_[shell_string_] holds the train command.
  static constexpr size_t kNone = size_t(-1);
  size_t shell_string_ = kNone;
  size_t flags_at_ = 0;       // in that string: just after the last train flag
  size_t exec_at_ = kNone;    // where "exec " goes (kNone: the command execs already)
  Place place_;
  std::optional<int> world_size_;
  TrainOptions opt_;
};

}  // namespace occ::cmd
