#include "apps/commands/job_command.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "apps/commands/shell_words.h"
#include "apps/commands/train_flags.h"
#include "core/device.h"
#include "core/error.h"
#include "core/layout.h"

namespace occ::cmd {

namespace fs = std::filesystem;

namespace {

std::string base_name(const std::string& word) { return fs::path(word).filename().string(); }

bool is_launcher(const std::string& word) {
  const std::string b = base_name(word);
  return b.rfind("mpirun", 0) == 0 || b.rfind("mpiexec", 0) == 0 || b == "orterun" || b == "prterun" || b == "srun";
}

bool is_shell(const std::string& word) {
  const std::string b = base_name(word);
  return b == "sh" || b == "bash" || b == "dash" || b == "zsh" || b == "ksh";
}

// NAME=value before a command (the shell's, or env's).
bool is_assignment(const std::string& w) {
  const size_t eq = w.find('=');
  if (eq == 0 || eq == std::string::npos || std::isdigit(static_cast<unsigned char>(w[0]))) return false;
  return std::all_of(w.begin(), w.begin() + std::ptrdiff_t(eq),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

std::optional<int> whole_number(const std::string& s) {
  if (s.empty() || s.size() > 9 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  return std::stoi(s);
}

// `path` against `base` (absolute, normal, without a trailing '/').
std::string joined(const std::string& base, const std::string& path) {
  fs::path p = fs::path(path).is_absolute() ? fs::path(path) : fs::path(base) / path;
  p = p.lexically_normal();
  if (p.has_parent_path() && p.filename().empty()) p = p.parent_path();  // "dir/" -> "dir"
  return p.string();
}

// The value of a launcher flag at words[i] ("-np 4", "--np=4", or attached to a
// short flag as srun's "-n4"), moving i past it; nullopt if words[i] is no such flag.
std::optional<std::string> flag_value(const std::vector<std::string>& words, size_t& i,
                                      const std::vector<std::string>& names, const char* attached) {
  const std::string& w = words[i];
  for (const std::string& name : names) {
    if (w == name) return i + 1 < words.size() ? std::optional<std::string>(words[++i]) : std::nullopt;
    if (w.rfind(name + "=", 0) == 0) return w.substr(name.size() + 1);
  }
  if (attached && w.size() > 2 && w.rfind(attached, 0) == 0 && w[1] != '-') return w.substr(2);
  return std::nullopt;
}

// The words of tokens [from, to) of a sh -c string, redirections and their
// targets left out; a word the shell expands is "" (its value is not known here).
std::vector<std::string> plain_words(const std::vector<ShellToken>& tokens, size_t from, size_t to) {
  std::vector<std::string> words;
  for (size_t u = from; u < to; ++u) {
    if (tokens[u].kind == ShellToken::Redirect) {
      ++u;
      continue;
    }
    words.push_back(tokens[u].expands ? "" : tokens[u].text);
  }
  return words;
}

const char* const kNoneFound =
    "launch: the command after -- must run `optimus-cc train ...` (e.g. -- mpirun -np 8 optimus-cc train --save ckpt "
    "...); none found: the program before `train` must be named optimus-cc or be this binary (by a path, a symlink or "
    "a name on PATH), given directly or inside sh -c \"...\"";

}  // namespace

void JobCommand::read_prefix(const std::vector<std::string>& words, Place& place) const {
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (!is_launcher(w)) {
      if (!place.launcher && !is_assignment(w) && w != "exec" && w != "env") place.wrapped = true;
      continue;
    }
    if (place.launcher) continue;  // (one launcher starts the ranks; a second would be inside them)
    place.launcher = true;
    const bool srun = base_name(w) == "srun";
    const std::vector<std::string> np = srun ? std::vector<std::string>{"-n", "--ntasks"}
                                             : std::vector<std::string>{"-np", "--np", "-n", "--n"};
    const std::vector<std::string> wdir = srun ? std::vector<std::string>{"--chdir", "-D"}
                                               : std::vector<std::string>{"-wdir", "--wdir", "-wd", "--wd"};
    bool np_seen = false, wdir_seen = false;  // (the first: a later one may be another program's flag)
    for (size_t j = i + 1; j < words.size(); ++j) {
      size_t k = j;
      if (auto v = flag_value(words, k, np, srun ? "-n" : nullptr)) {
        if (!np_seen) place.world = whole_number(*v);
        np_seen = true;
        j = k;
      } else if (auto d = flag_value(words, k = j, wdir, srun ? "-D" : nullptr)) {
        if (!wdir_seen) {
          if (d->empty()) {
            place.dir.reset();
            place.dir_unknown_why = fmt::format("the launcher's {} is not a literal directory", words[j]);
          } else if (place.dir || fs::path(*d).is_absolute()) {
            place.dir = joined(place.dir.value_or("/"), *d);
          }
        }
        wdir_seen = true;
        j = k;
      }
    }
  }
}

bool JobCommand::names_this_program(const std::string& word, const Place& place) const {
  if (word.empty()) return false;
  if (base_name(word) == "optimus-cc") return true;
  auto is_this_binary = [](const fs::path& p) {
    std::error_code ec;
    return fs::is_regular_file(p, ec) && fs::equivalent(p, "/proc/self/exe", ec);
  };
  std::error_code ec;
  if (word.find('/') != std::string::npos) {
    if (fs::path(word).is_absolute()) return is_this_binary(word);
    // (a relative path: from the launcher's working directory, or from here)
    return (place.dir && is_this_binary(fs::path(*place.dir) / word)) || is_this_binary(fs::current_path(ec) / word);
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "";
  for (size_t at = 0; at <= dirs.size();) {
    size_t colon = dirs.find(':', at);
    if (colon == std::string::npos) colon = dirs.size();
    const std::string dir = dirs.substr(at, colon - at);
    const fs::path candidate = fs::path(dir.empty() ? "." : dir) / word;
    if (::access(candidate.c_str(), X_OK) == 0 && fs::is_regular_file(candidate, ec))
      return is_this_binary(candidate);  // the first on PATH is the one that runs
    at = colon + 1;
  }
  return false;
}

bool JobCommand::find_direct(bool found_in_shell) {
  std::vector<size_t> found;
  for (size_t i = 1; i < argv_.size(); ++i) {
    if (argv_[i] != "train") continue;
    Place place;
    place.dir = fs::current_path().string();
    read_prefix(std::vector<std::string>(argv_.begin(), argv_.begin() + std::ptrdiff_t(i - 1)), place);
    if (names_this_program(argv_[i - 1], place)) {
      if (found.empty()) place_ = place;
      found.push_back(i);
    }
  }
  if (found.size() + (found_in_shell ? 1 : 0) > 1)
    throw UsageError("launch: the command runs `optimus-cc train` twice; supervise one job at a time");
  if (found.empty()) return false;
  size_t end = found[0] + 1;
  while (end < argv_.size() && argv_[end] != ":") ++end;  // (":" separates MPMD programs)
  train_flags_.assign(argv_.begin() + std::ptrdiff_t(found[0] + 1), argv_.begin() + std::ptrdiff_t(end));
  train_end_ = end;
  return true;
}

bool JobCommand::find_in_shell() {
  // sh [options] -c STRING (the options may cluster: -ec, -lc; -o takes a value).
  size_t shell = kNone, string_at = kNone;
  for (size_t j = 0; j < argv_.size() && shell == kNone; ++j) {
    if (!is_shell(argv_[j])) continue;
    bool c = false;
    size_t k = j + 1;
    for (; k < argv_.size(); ++k) {
      const std::string& w = argv_[k];
      if (w == "--") {
        ++k;
        break;
      }
      if (w == "-o" || w == "+o") {
        ++k;
        continue;
      }
      if (w.size() >= 2 && w[0] == '-' && w[1] != '-') {
        c = c || w.find('c') != std::string::npos;
        continue;
      }
      if (w.size() >= 2 && (w[0] == '+' || w.rfind("--", 0) == 0)) continue;  // +e, --login
      break;
    }
    if (c && k < argv_.size()) shell = j, string_at = k;
  }
  if (shell == kNone) return false;
  const std::string& s = argv_[string_at];
  const std::vector<ShellToken> tokens = split_shell_words(s);
  auto word = [&](size_t u, const char* text = nullptr) {
    return u < tokens.size() && tokens[u].kind == ShellToken::Word && !tokens[u].expands &&
           (!text || tokens[u].text == text);
  };
  auto is_op = [&](size_t u) { return tokens[u].kind == ShellToken::Operator; };
  std::vector<size_t> found;
  Place found_place;
  for (size_t t = 1; t < tokens.size(); ++t) {
    if (!word(t, "train") || !word(t - 1)) continue;
    // Where the ranks run: the launcher around the shell, then the string's cds at
    // its top level before this command, then a launcher inside the string.
    Place place;
    place.dir = fs::current_path().string();
    read_prefix(std::vector<std::string>(argv_.begin(), argv_.begin() + std::ptrdiff_t(shell)), place);
    size_t begin = t;
    while (begin > 0 && !is_op(begin - 1)) --begin;
    std::vector<std::optional<std::string>> dirs;  // saved at each "("
    for (size_t a = 0; a < begin;) {
      size_t b = a;
      while (b < begin && !is_op(b)) ++b;
      std::vector<std::string> cmd = plain_words(tokens, a, b);
      auto first = std::find_if(cmd.begin(), cmd.end(), [](const std::string& w) { return !is_assignment(w); });
      if (first != cmd.end() && *first == "cd") {
        auto arg = std::find_if(first + 1, cmd.end(), [](const std::string& w) { return w.empty() || w[0] != '-' || w == "-"; });
        if (arg == cmd.end() || arg->empty() || *arg == "-") {
          place.dir.reset();
          place.dir_unknown_why = fmt::format("sh -c's `{}` goes to a directory only the shell knows",
                                              s.substr(tokens[a].begin, tokens[b - 1].end - tokens[a].begin));
        } else if (place.dir || fs::path(*arg).is_absolute()) {
          place.dir = joined(place.dir.value_or("/"), *arg);
        }
      }
      if (b < begin && tokens[b].text == "(") dirs.push_back(place.dir);
      if (b < begin && tokens[b].text == ")" && !dirs.empty()) place.dir = dirs.back(), dirs.pop_back();
      a = b + 1;
    }
    read_prefix(plain_words(tokens, begin, t - 1), place);
    if (!names_this_program(tokens[t - 1].text, place)) continue;
    if (found.empty()) found_place = place;
    found.push_back(t);
  }
  if (found.size() > 1) throw UsageError("launch: the command runs `optimus-cc train` twice; supervise one job at a time");
  if (found.empty()) return false;
  const size_t t = found[0];
  size_t begin = t, end = t;
  while (begin > 0 && !is_op(begin - 1)) --begin;
  while (end < tokens.size() && !is_op(end)) ++end;
  // It must replace the shell (exec), so that signals and the exit status are
  // the launcher's: the string's last command, at its top level.
  int depth = 0;
  for (size_t u = 0; u < begin; ++u)
    if (is_op(u)) depth += tokens[u].text == "(" ? 1 : tokens[u].text == ")" ? -1 : 0;
  bool last = depth == 0 && (begin == 0 || (tokens[begin - 1].text != "|" && tokens[begin - 1].text != "|&"));
  for (size_t u = end; u < tokens.size(); ++u)
    last = last && is_op(u) && (tokens[u].text == ";" || tokens[u].text == "\n");
  if (!last)
    throw UsageError(
        "launch: in sh -c, the train command must be the string's last command, outside any pipeline, subshell or "
        "background job (e.g. sh -c \"cd DIR && mpirun -np N optimus-cc train ...\"), so that it replaces the shell "
        "and the supervisor's signals reach it; redirect launch's own output rather than piping the job's");
  flags_at_ = tokens[t].end;
  for (size_t u = t + 1; u < end; ++u) {
    if (tokens[u].kind == ShellToken::Redirect) {
      ++u;
      continue;
    }
    if (tokens[u].text == ":" && !tokens[u].expands) break;  // (MPMD: another program's words)
    if (tokens[u].expands)
      throw UsageError(fmt::format("launch: the train flag {} inside sh -c is a shell expansion the supervisor cannot "
                                   "read; write the train flags literally in the string (or give optimus-cc train "
                                   "directly after --)",
                                   s.substr(tokens[u].begin, tokens[u].end - tokens[u].begin)));
    train_flags_.push_back(tokens[u].text);
    flags_at_ = tokens[u].end;
  }
  // "exec" goes before the command's first word, after its NAME=value assignments
  // (`A=1 exec prog` passes A to prog), unless the command execs already.
  for (size_t u = begin; u < end; ++u) {
    if (tokens[u].kind == ShellToken::Redirect) {
      ++u;
      continue;
    }
    if (is_assignment(tokens[u].text)) continue;
    exec_at_ = tokens[u].text == "exec" && !tokens[u].expands ? kNone : tokens[u].begin;
    break;
  }
  shell_string_ = string_at;
  place_ = found_place;
  place_.several_programs = std::any_of(tokens.begin(), tokens.end(), [](const ShellToken& k) { return k.text == ":"; });
  return true;
}

JobCommand::JobCommand(std::vector<std::string> argv) : argv_(std::move(argv)) {
  const bool in_shell = find_in_shell();
  if (!find_direct(in_shell) && !in_shell) throw UsageError(kNoneFound);
  // The ranks the launcher starts: its -np; 1 with no launcher and nothing else
  // around the program; not known otherwise (another MPMD program, a wrapper).
  world_size_ = place_.launcher ? place_.world : place_.wrapped ? std::nullopt : std::optional<int>(1);
  if (place_.several_programs || std::find(argv_.begin(), argv_.end(), ":") != argv_.end()) world_size_.reset();
  parse_train_flags();
  validate_train_flags();
  if (opt_.save.empty())
    throw UsageError("launch: the train command has no --save DIR, so a restart could only start from the beginning; "
                     "add --save DIR and --save-interval N");
  opt_.save = resolve(opt_.save, "--save");
  if (!opt_.load.empty()) opt_.load = resolve(opt_.load, "--load");
}

std::string JobCommand::resolve(const std::string& path, const std::string& flag) const {
  if (path.empty() || fs::path(path).is_absolute()) return path.empty() ? path : joined("/", path);
  if (!place_.dir)
    throw UsageError(fmt::format("launch: the train command's {}{} is a relative path, and the directory the job runs "
                                 "in is not known here ({}); give it as an absolute path",
                                 flag.empty() ? "" : flag + " ", path, place_.dir_unknown_why));
  return joined(*place_.dir, path);
}

void JobCommand::parse_train_flags() {
  // Parsed as the train command parses it (its errors are the train command's),
  // a --config file read where the ranks will read it.
  CLI::App app{"", "train"};
  add_train_command_flags(app, opt_);
  std::vector<std::string> args{"train"};
  for (size_t i = 0; i < train_flags_.size(); ++i) {
    const std::string& a = train_flags_[i];
    if (a == "--config" && i + 1 < train_flags_.size() && train_flags_[i + 1].rfind("--", 0) != 0 &&
        !train_flags_[i + 1].empty()) {
      args.insert(args.end(), {a, resolve(train_flags_[++i], "--config")});
    } else if (a.rfind("--config=", 0) == 0 && a.size() > 9) {
      args.push_back("--config=" + resolve(a.substr(9), "--config"));
    } else {
      args.push_back(a);
    }
  }
  std::vector<char*> ptrs;
  for (auto& a : args) ptrs.push_back(a.data());
  try {
    if (parse_command_line(app, int(ptrs.size()), ptrs.data()) >= 0)
      throw UsageError("it asks for --help; run `optimus-cc train --help` directly");
    refuse_inapplicable_flags(app, opt_);
  } catch (const Error& e) {
    throw UsageError(fmt::format("launch: the train command: {}", e.what()));
  }
}

void JobCommand::validate_train_flags() const {
  // TrainOptions::validate, train's own check, on what is known here. The ranks
  // alone know the tokenizer's vocabulary (its file is read on their hosts) and
  // their devices: a placeholder vocabulary that passes, and a GPU (the device
  // that refuses least) unless --device says. Where the world size is not known,
  // a data-parallel size of 1: every rule on it then holds for a larger one too
  // only if it holds here, so nothing valid is refused.
  TrainOptions check = opt_;
  try {
    if (check.model.vocab_size <= 0)
      check.model.vocab_size = int(std::clamp<int64_t>(
          int64_t(std::max(1, check.model.make_vocab_size_divisible_by)) * std::max(1, check.tensor_parallel), 2,
          1 << 30));
    check.device = check.device_name.empty() ? Device::Cuda : parse_device(check.device_name);
    check.resolve_train_samples();
    ParallelLayout layout;
    if (world_size_) {
      layout = ParallelLayout::from_rank(0, *world_size_, check.tensor_parallel, check.pipeline_parallel);
    } else {
      OCC_CHECK(check.tensor_parallel >= 1 && check.pipeline_parallel >= 1,
                "tensor- and pipeline-model-parallel sizes must be >= 1");
      layout.tp_size = check.tensor_parallel, layout.pp_size = check.pipeline_parallel, layout.dp_size = 1;
    }
    layout.vp_size = check.model_chunks();
    check.validate(layout);
  } catch (const Error& e) {
    throw UsageError(fmt::format("launch: the train command{}: {}",
                                 world_size_ ? fmt::format(" on {} rank{}", *world_size_, *world_size_ == 1 ? "" : "s") : std::string(), e.what()));
  }
}

std::vector<std::string> JobCommand::with_train_flags(const std::vector<std::string>& flags,
                                                      const std::vector<std::string>& dropped) const {
  if (shell_string_ == kNone) {
    const size_t train_begin = train_end_ - train_flags_.size();
    std::vector<std::string> out(argv_.begin(), argv_.begin() + std::ptrdiff_t(train_begin));
    for (size_t i = train_begin; i < train_end_; ++i) {
      const std::string& a = argv_[i];
      const bool drop = std::any_of(dropped.begin(), dropped.end(), [&](const std::string& flag) {
        return a == flag || a.rfind(flag + "=", 0) == 0;
      });
      if (!drop) {
        out.push_back(a);
      } else if (a.find('=') == std::string::npos && i + 1 < train_end_) {
        ++i;  // (its value)
      }
    }
    out.insert(out.end(), flags.begin(), flags.end());
    out.insert(out.end(), argv_.begin() + std::ptrdiff_t(train_end_), argv_.end());
    return out;
  }
  std::string s = argv_[shell_string_], added;
  for (const std::string& f : flags) added += " " + shell_quote(f);
  s.insert(flags_at_, added);
  if (exec_at_ != kNone) s.insert(exec_at_, "exec ");
  std::vector<std::string> out = argv_;
  out[shell_string_] = s;
  return out;
}

std::vector<std::string> JobCommand::argv_for(const Attempt& attempt) const {
  std::vector<std::string> flags;
  std::vector<std::string> dropped;
  if (attempt.resumes) {
    // Where the run resumes, always named, in place of the user's --load / --ckpt-step (where
    // the run began). Inside a sh -c string those stay, before these: a flag given twice
    // takes its last value.
    dropped = {"--load", "--ckpt-step"};
    flags.insert(flags.end(), {"--load", attempt.load, "--ckpt-step", std::to_string(attempt.ckpt_step)});
    // The user's --load was a starting point (e.g. --finetune from an imported model): the
    // job's own checkpoint is a whole one.
    if (opt_.finetune) flags.push_back("--finetune=false");
    if (opt_.no_load_optim) flags.push_back("--no-load-optim=false");
  }
  // The supervisor's stop signal reaches the ranks as a graceful stop (on the command line
  // even when a --config sets it: a rank installs the handler before it parses its flags).
  if (std::none_of(train_flags_.begin(), train_flags_.end(),
                   [](const std::string& a) { return a.rfind("--exit-signal-handler", 0) == 0; }))
    flags.push_back("--exit-signal-handler");
  if (!attempt.heartbeat_dir.empty()) flags.insert(flags.end(), {"--heartbeat-dir", attempt.heartbeat_dir});
  if (!attempt.run_lock_token.empty()) flags.insert(flags.end(), {"--run-lock-token", attempt.run_lock_token});
  return with_train_flags(flags, dropped);
}

}  // namespace occ::cmd
