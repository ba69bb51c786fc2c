#include "apps/commands/job_command.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "apps/commands/train_flags.h"
#include "core/error.h"

namespace occ::cmd {

JobCommand::JobCommand(std::vector<std::string> argv) : argv_(std::move(argv)) {
  for (size_t i = 1; i < argv_.size() && train_begin_ == 0; ++i)
    if (argv_[i] == "train" && std::filesystem::path(argv_[i - 1]).filename() == "optimus-cc") train_begin_ = i + 1;
  if (train_begin_ == 0)
    throw UsageError("launch: the command after -- must run `optimus-cc train ...` (e.g. -- mpirun -np 8 "
                     "optimus-cc train --save ckpt ...); none found");
  train_end_ = train_begin_;
  while (train_end_ < argv_.size() && argv_[train_end_] != ":") ++train_end_;  // (":" separates MPMD programs)
  for (size_t i = train_end_; i < argv_.size(); ++i)
    if (argv_[i] == "train" && std::filesystem::path(argv_[i - 1]).filename() == "optimus-cc")
      throw UsageError("launch: the command runs `optimus-cc train` twice; supervise one job at a time");

  // Parsed as the train command parses it (its errors are the train command's).
  CLI::App app{"", "train"};
  add_train_command_flags(app, opt_);
  std::vector<std::string> args{"train"};
  args.insert(args.end(), argv_.begin() + std::ptrdiff_t(train_begin_), argv_.begin() + std::ptrdiff_t(train_end_));
  std::vector<char*> ptrs;
  for (auto& a : args) ptrs.push_back(a.data());
  try {
    if (parse_command_line(app, int(ptrs.size()), ptrs.data()) >= 0)
      throw UsageError("it asks for --help; run `optimus-cc train --help` directly");
    refuse_inapplicable_flags(app, opt_);
  } catch (const Error& e) {
    throw UsageError(fmt::format("launch: the train command: {}", e.what()));
  }
  if (opt_.save.empty())
    throw UsageError("launch: the train command has no --save DIR, so a restart could only start from the beginning; "
                     "add --save DIR and --save-interval N");
}

std::vector<std::string> JobCommand::argv_for(const Attempt& attempt) const {
  std::vector<std::string> out(argv_.begin(), argv_.begin() + std::ptrdiff_t(train_begin_));
  for (size_t i = train_begin_; i < train_end_; ++i) {
    const std::string& a = argv_[i];
    if (attempt.resumes) {  // the user's --load / --ckpt-step: where the run began, not where it resumes
      if (a == "--load" || a == "--ckpt-step") {
        ++i;
        continue;
      }
      if (a.rfind("--load=", 0) == 0 || a.rfind("--ckpt-step=", 0) == 0) continue;
    }
    out.push_back(a);
  }
  if (attempt.resumes) {
    out.insert(out.end(), {"--load", attempt.load, "--ckpt-step", std::to_string(attempt.ckpt_step)});
    // The user's --load was a starting point (e.g. --finetune from an imported model): the
    // job's own checkpoint is a whole one.
    if (opt_.finetune) out.push_back("--finetune=false");
    if (opt_.no_load_optim) out.push_back("--no-load-optim=false");
  }
  // The supervisor's stop signal reaches the ranks as a graceful stop (on the command line
  // even when a --config sets it: a rank installs the handler before it parses its flags).
  if (std::none_of(argv_.begin() + std::ptrdiff_t(train_begin_), argv_.begin() + std::ptrdiff_t(train_end_),
                   [](const std::string& a) { return a.rfind("--exit-signal-handler", 0) == 0; }))
    out.push_back("--exit-signal-handler");
  if (!attempt.heartbeat_dir.empty()) out.insert(out.end(), {"--heartbeat-dir", attempt.heartbeat_dir});
  if (!attempt.run_lock_token.empty()) out.insert(out.end(), {"--run-lock-token", attempt.run_lock_token});
  out.insert(out.end(), argv_.begin() + std::ptrdiff_t(train_end_), argv_.end());
  return out;
}

}  // namespace occ::cmd
