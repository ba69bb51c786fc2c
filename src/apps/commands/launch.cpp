// `optimus-cc launch [--max-restarts N] [--restart-backoff S] [--hang-timeout S]
//  -- mpirun ... optimus-cc train ...`: runs a training job to its end without a
// person. When the job fails (a non-zero exit, a rank killed by a signal, a hang
// seen in the ranks' heartbeats) it is restarted from the newest checkpoint
// under its --save that verifies, up to N times, each time saying why, at which
// iteration and how many iterations were lost. A failure that would repeat (a
// start-up error: a bad flag, an unwritable path, a refused checkpoint; or the
// same failure at the same iteration twice) ends it with that error. SIGTERM,
// SIGUSR1 or SIGINT to the supervisor reach the ranks as the graceful stop of
// --exit-signal-handler (a checkpoint, exit 0), and the supervisor exits 0 after it.
//
// Why a supervisor process around the launcher rather than restarts inside
// the job: a rank killed by a signal or hung in a collective takes MPI's job
// with it, and only a process outside that job can start a new one.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "apps/commands/command_line.h"
#include "apps/commands/commands.h"
#include "apps/commands/hang_watch.h"
#include "apps/commands/job_command.h"
#include "apps/commands/launch_front.h"
#include "core/error.h"
#include "core/timer.h"
#include "train/checkpoint_store.h"
#include "train/checkpoint_verify.h"

namespace occ::cmd {

namespace {

volatile std::sig_atomic_t g_stop_signals = 0, g_stop_signal = 0;

extern "C" void on_stop_signal(int sig) {
  g_stop_signal = sig;
  g_stop_signals = g_stop_signals + 1;
}

void say(const std::string& line) {
  std::printf("launch: %s\n", line.c_str());
  std::fflush(stdout);
}

std::string quoted(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) {
    const bool plain = !a.empty() && a.find_first_of(" \t'\"\\$`;&|<>()*?") == std::string::npos;
    s += (s.empty() ? "" : " ") + (plain ? a : "'" + a + "'");
  }
  return s;
}

std::string plural(int64_t n, const char* word) { return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s"); }

// Runs argv in a process group of its own (so that a terminal's Ctrl-C reaches
// only the supervisor, which stops the job gracefully), stdin from /dev/null
// (mpirun in a background group must not read the terminal).
pid_t spawn(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) fail("launch: cannot fork: {}", std::strerror(errno));
  if (pid == 0) {
    ::setpgid(0, 0);
    const int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, STDIN_FILENO);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : {SIGTERM, SIGUSR1, SIGINT}) ::sigaction(sig, &dfl, nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "error: launch: cannot run %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // (also here: whichever runs first)
  return pid;
}

// The processes of ranks on this host, from their heartbeats (still optimus-cc: pids are reused).
std::vector<pid_t> local_rank_pids(const std::vector<heartbeat::Snapshot>& ranks) {
  char host[64] = {};
  ::gethostname(host, sizeof host - 1);
  std::vector<pid_t> pids;
  for (const auto& s : ranks) {
    if (s.rank < 0 || s.pid <= 0 || s.host != host) continue;
    std::ifstream comm(fmt::format("/proc/{}/comm", s.pid));
    std::string name;
    std::error_code ec;  // (this binary under another name: a symlink to it)
    if ((std::getline(comm, name) && name == "optimus-cc") ||
        std::filesystem::equivalent(fmt::format("/proc/{}/exe", s.pid), "/proc/self/exe", ec))
      pids.push_back(pid_t(s.pid));
  }
  return pids;
}

bool process_running(pid_t pid) {
  // A zombie (exited, not reaped) counts as gone.
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

// Sleeps up to `seconds`, returning early when a stop signal arrives.
void pause_unless_stopped(double seconds) {
  const double until = now_seconds() + seconds;
  while (now_seconds() < until && g_stop_signals == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

struct Outcome {
  enum Kind { Exited, Signaled, Hung } kind = Exited;
  int code = 0;  // exit status, or signal
  // The supervisor's exit status for it.
  int status() const { return kind == Exited ? code : kind == Signaled ? 128 + code : 1; }
};

struct LaunchOptions {
  int max_restarts = 3;
  double restart_backoff_s = 10;
  double hang_timeout_s = -1;  // (default: 3/4 of the job's --comm-timeout)
  std::string heartbeat_dir;
};

class Supervisor {
 public:
  Supervisor(LaunchOptions options, JobCommand job)
      : opt_(std::move(options)),
        job_(std::move(job)),
        save_(job_.options().save),
        watch_(opt_.heartbeat_dir.empty() ? (std::filesystem::path(save_) / "heartbeat").string()
                                          : opt_.heartbeat_dir,
               opt_.hang_timeout_s) {}

  int run();

 private:
  Outcome run_attempt(const std::vector<std::string>& argv);
  void end_hung_job(pid_t child);
  void wait_until_ranks_gone();
  // What choosing `c` passed over (a damaged checkpoint, an unreadable marker), one line each.
  std::vector<std::string> passed_over(const ResumeChoice& c) const;
  std::string failure_text(const Outcome& o) const;

  LaunchOptions opt_;
  JobCommand job_;
  std::string save_;
  HangWatch watch_;
};

std::vector<std::string> Supervisor::passed_over(const ResumeChoice& c) const {
  std::vector<std::string> lines;
  if (!c.marker_problem.empty()) lines.push_back(fmt::format("the checkpoint marker is unreadable ({})", c.marker_problem));
  for (const auto& [it, problem] : c.refused)
    lines.push_back(fmt::format("checkpoint {}/iter_{:07d} fails verification: {}", save_, it, problem));
  if (!c.refused.empty() && c.iteration)
    lines.push_back(fmt::format("resuming from {}/iter_{:07d}, the newest checkpoint that verifies", save_, *c.iteration));
  return lines;
}

std::string Supervisor::failure_text(const Outcome& o) const {
  std::string reported = watch_.reported_failure();
  if (o.kind == Outcome::Hung) return fmt::format("hung (no rank progressed for {:g} s)", opt_.hang_timeout_s);
  if (o.kind == Outcome::Signaled)
    return fmt::format("the launched command was killed by signal {} ({})", o.code, strsignal(o.code));
  if (!reported.empty()) return reported;
  if (o.code > 128 && o.code < 128 + 65)
    return fmt::format("a rank was killed by signal {} ({}) (exit status {})", o.code - 128, strsignal(o.code - 128),
                       o.code);
  return fmt::format("the job exited with status {}", o.code);
}

void Supervisor::end_hung_job(pid_t child) {
  // Ranks on this host at once (a stopped process takes SIGKILL too); the
  // launcher then ends the others, or its own SIGTERM does.
  for (pid_t pid : local_rank_pids(watch_.ranks())) ::kill(pid, SIGKILL);
  ::kill(child, SIGTERM);
}

Outcome Supervisor::run_attempt(const std::vector<std::string>& argv) {
  watch_.reset();
  const pid_t child = spawn(argv);
  int forwarded = 0;
  bool hung = false;
  double hung_at = 0;
  const double poll_every = std::clamp(opt_.hang_timeout_s / 10, 0.1, 1.0);
  const double started = now_seconds();
  double polled_at = 0;
  bool noted_missing = false, held = false;
  for (;;) {
    int status = 0;
    const pid_t done = ::waitpid(child, &status, WNOHANG);
    if (done == child) {
      watch_.poll(now_seconds());  // the ranks' last words
      if (hung) return {Outcome::Hung, 0};
      if (WIFSIGNALED(status)) return {Outcome::Signaled, WTERMSIG(status)};
      return {Outcome::Exited, WEXITSTATUS(status)};
    }
    if (done < 0 && errno != EINTR) fail("launch: waitpid: {}", std::strerror(errno));
    // Each stop signal to the supervisor becomes one SIGUSR1 to the launcher,
    // which passes it to every rank (mpirun does): the first stops gracefully,
    // a second at once (--exit-signal-handler). Not before every rank trains:
    // a rank still starting has no handler yet, and the signal would kill it.
    if (forwarded < g_stop_signals && !watch_.all_training() && !held) {
      held = true;
      say(fmt::format("signal {} ({}): the job is starting; passing it on once every rank trains",
                      int(g_stop_signal), strsignal(int(g_stop_signal))));
    }
    while (forwarded < g_stop_signals && watch_.all_training()) {
      ++forwarded;
      ::kill(child, SIGUSR1);
      say(fmt::format("signal {} ({}): {}", int(g_stop_signal), strsignal(int(g_stop_signal)),
                      forwarded == 1 ? "asking the job to stop after this iteration, with a checkpoint"
                                     : "asking the job to stop at once"));
    }
    const double now = now_seconds();
    if (now - polled_at >= poll_every) {
      polled_at = now;
      watch_.poll(now);
      if (!noted_missing && opt_.hang_timeout_s > 0 && watch_.any_rank_started() && !watch_.armed() &&
          now - started > 120) {
        noted_missing = true;  // e.g. a heartbeat directory that is not shared by every host
        say(fmt::format("note: after {:.0f} s only {} of {} ranks have a heartbeat in {}; hang detection waits for "
                        "all (on several hosts, pass --heartbeat-dir on a file system they all share)",
                        now - started, watch_.ranks_present(), watch_.world_size(), watch_.dir()));
      }
      if (!hung && watch_.hung(now)) {
        hung = true;
        hung_at = now;
        say(fmt::format("the job is hung: no rank progressed for {:g} s; ending it. Where each rank is:",
                        opt_.hang_timeout_s));
        for (const std::string& line : watch_.describe(now)) say("  " + line);
        end_hung_job(child);
      }
    }
    if (hung && now - hung_at > 15) ::kill(-child, SIGKILL);  // the launcher did not end it
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void Supervisor::wait_until_ranks_gone() {
  // A restart beside a rank of the last attempt would share its files and ports.
  const double start = now_seconds();
  for (;;) {
    std::vector<pid_t> left;
    for (pid_t pid : local_rank_pids(watch_.ranks()))
      if (process_running(pid)) left.push_back(pid);
    if (left.empty()) return;
    if (now_seconds() - start > 10) {
      say(fmt::format("{} of the last attempt still running after 10 s: killing them", plural(int64_t(left.size()), "rank")));
      for (pid_t pid : left) ::kill(pid, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

int Supervisor::run() {
  const double start = now_seconds();
  const TrainOptions& train = job_.options();
  if (train.save_interval <= 0)
    say("note: the train command has no --save-interval: checkpoints are saved only at its end (or a graceful "
        "stop), so a restart repeats the whole run");
  std::set<std::string> failures_seen;  // (failure, iteration): one that comes again is not restarted
  int restarts = 0, stalled = 0;
  int64_t lost = 0;
  ResumeChoice resume = choose_resume_checkpoint(save_);
  for (const std::string& line : passed_over(resume)) say(line);
  for (int attempt = 1;; ++attempt) {
    if ((resume.latest || !resume.marker_problem.empty()) && !resume.iteration) {
      const std::string why = resume.refused.empty()
                                  ? resume.marker_problem
                                  : fmt::format("the newest, iter_{:07d}: {}", resume.refused.front().first,
                                                resume.refused.front().second);
      std::fprintf(stderr, "error: launch: no checkpoint under %s verifies (%s); restore one, or move them away to "
                   "start afresh\n", save_.c_str(), why.c_str());
      return 1;
    }
    if (g_stop_signals > 0) {
      say("stopped before the next attempt started");
      return 0;
    }
    JobCommand::Attempt a;
    a.heartbeat_dir = watch_.dir();
    if (resume.iteration) {
      a.load = save_;
      a.resumes = true;
      if (resume.iteration != resume.latest) a.ckpt_step = *resume.iteration;
    }
    const std::vector<std::string> argv = job_.argv_for(a);
    say(fmt::format("attempt {}: {}: {}", attempt,
                    resume.iteration ? fmt::format("resuming from {}/iter_{:07d}", save_, *resume.iteration)
                                     : std::string(train.load.empty() ? "from the beginning" : "from --load " + train.load),
                    quoted(argv)));
    const int64_t started_from = resume.iteration.value_or(0);
    const Outcome outcome = run_attempt(argv);
    const int64_t reached = std::max(watch_.iterations_done(), started_from);
    wait_until_ranks_gone();
    if (outcome.kind == Outcome::Exited && outcome.code == 0) {
      const auto latest = CheckpointStore(save_).latest();
      const std::string where = latest ? fmt::format("checkpoint {}/iter_{:07d}", save_, *latest) : "no checkpoint";
      if (g_stop_signals > 0)
        say(fmt::format("stopped by signal {} ({}): the job saved {} and exited 0", int(g_stop_signal),
                        strsignal(int(g_stop_signal)), where));
      else
        say(fmt::format("the job finished at iteration {} of {} ({}) after {}, {} lost in all, in {:.0f} s", reached,
                        train.train_iters, where, plural(restarts, "restart"), plural(lost, "iteration"),
                        now_seconds() - start));
      return 0;
    }
    const std::string failure = failure_text(outcome);
    const int status = outcome.status() == 0 ? 1 : outcome.status();
    if (g_stop_signals > 0) {
      std::fprintf(stderr, "error: launch: the job ended with status %d after the stop signal: %s\n", status,
                   failure.c_str());
      return status;
    }
    const bool started = watch_.any_rank_started();
    resume = choose_resume_checkpoint(save_);  // (one damaged since the attempt started is passed over here)
    const bool same_checkpoint = resume.iteration.value_or(0) == started_from;
    std::string verdict;
    // A start-up error repeats; so does a launcher that starts no rank (a wrong
    // path), unless it ended by a signal (a rank killed while starting).
    const bool killed = outcome.kind == Outcome::Signaled || (outcome.kind == Outcome::Exited && outcome.code > 128);
    if (((!started && !killed) || watch_.failed_at_startup()) && same_checkpoint)
      verdict = fmt::format("not restarting: the job failed {}, and a restart would fail the same way: {}",
                            started ? "at start-up" : "before any rank started", failure);
    else if (!failures_seen.insert(fmt::format("{} @ {}", failure, reached)).second)
      verdict = fmt::format("not restarting: the same failure at iteration {} twice: {}", reached, failure);
    else if (restarts >= opt_.max_restarts)
      verdict = fmt::format("giving up after {} (--max-restarts {}); the last failure, at iteration {}: {}",
                            plural(restarts, "restart"), opt_.max_restarts, reached, failure);
    if (!verdict.empty()) {
      std::fprintf(stderr, "error: launch: %s\n", verdict.c_str());
      return status;
    }
    ++restarts;
    const int64_t from = resume.iteration.value_or(0);
    lost += std::max<int64_t>(0, reached - from);
    stalled = from > started_from ? 0 : stalled + 1;  // the backoff grows while restarts gain nothing
    const double delay = opt_.restart_backoff_s * std::pow(2.0, std::min(stalled, 6) - (stalled > 0 ? 1 : 0));
    say(fmt::format("attempt {} failed at iteration {}: {}", attempt, reached, failure));
    for (const std::string& line : passed_over(resume)) say(line);
    say(fmt::format("restart {} of {} in {:g} s from {}: {} lost", restarts, opt_.max_restarts, delay,
                    resume.iteration ? fmt::format("{}/iter_{:07d}", save_, from) : std::string("the beginning"),
                    plural(std::max<int64_t>(0, reached - from), "iteration")));
    pause_unless_stopped(delay);
  }
}

}  // namespace

int launch(int argc, char** argv) {
  // Everything after "--" is the job's command.
  int split = 1;
  while (split < argc && std::strcmp(argv[split], "--") != 0) ++split;
  CLI::App app{"Run a training job to its end: restart it from its newest checkpoint that verifies when it fails "
               "(a non-zero exit, a rank killed, a hang). Usage: optimus-cc launch [options] -- mpirun -np N "
               "optimus-cc train --save DIR --save-interval K ...",
               "launch"};
  LaunchOptions opt;
  app.add_option("--max-restarts", opt.max_restarts, "restarts before giving up (>= 0)")->capture_default_str();
  app.add_option("--restart-backoff", opt.restart_backoff_s,
                 "seconds before a restart (>= 0); doubled for each further restart that gained no new checkpoint")
      ->capture_default_str();
  app.add_option("--hang-timeout", opt.hang_timeout_s,
                 "seconds without progress on any rank (each rank's heartbeat) after which the job is ended as hung "
                 "and restarted; start-up, checkpoint saves and loads do not count (0: off; default: 3/4 of the "
                 "train command's --comm-timeout, which would otherwise end a hang first, without saying where "
                 "each rank waits)");
  app.add_option("--heartbeat-dir", opt.heartbeat_dir,
                 "where the ranks' heartbeat files go (default: SAVE/heartbeat; on a multi-host job, a directory "
                 "every host and this one share)");
  refuse_words_before_split(split, argc, argv);
  const int rc = parse_command_line(app, split, argv);  // (one line naming the flag: not a number, nan, "")
  if (rc >= 0) return rc;
  auto at_least_zero = [](const char* flag, double v, const char* what) {
    if (v < 0) throw UsageError(fmt::format("launch: {} must be >= 0 (got {:g}); {}", flag, v, what));
  };
  at_least_zero("--max-restarts", opt.max_restarts, "0 ends the run at its first failure");
  at_least_zero("--restart-backoff", opt.restart_backoff_s, "0 restarts at once");
  if (app.count("--hang-timeout")) at_least_zero("--hang-timeout", opt.hang_timeout_s, "0 turns hang detection off");
  if (split + 1 >= argc)
    throw UsageError("launch: no job command; give it after --: optimus-cc launch -- mpirun -np N optimus-cc train ...");
  JobCommand job(std::vector<std::string>(argv + split + 1, argv + argc));
  const double comm_timeout = job.options().comm_timeout_s;
  if (!app.count("--hang-timeout")) opt.hang_timeout_s = 0.75 * comm_timeout;
  if (opt.hang_timeout_s >= comm_timeout)
    std::printf("launch: note: --hang-timeout %g is not below the train command's --comm-timeout %g: a rank's "
                "network wait ends the job first, with its own message\n", opt.hang_timeout_s, comm_timeout);
  // launch's own path is this process's; the default, the job's --save, as its ranks resolve it (absolute:
  // they are passed on to ranks that may run elsewhere, mpirun -wdir).
  std::filesystem::path heartbeat_dir = opt.heartbeat_dir.empty()
                                           ? std::filesystem::path(job.options().save) / "heartbeat"
                                           : std::filesystem::absolute(opt.heartbeat_dir).lexically_normal();
  if (heartbeat_dir.filename().empty()) heartbeat_dir = heartbeat_dir.parent_path();  // ("hb/")
  opt.heartbeat_dir = heartbeat_dir.string();
  // (A file in the way would otherwise end the first attempt with a line about creating directories.)
  for (const auto& [flag, dir] : {std::pair{"the train command's --save", job.options().save},
                                  std::pair{"--heartbeat-dir", opt.heartbeat_dir}}) {
    std::error_code ec;
    if (std::filesystem::exists(dir, ec) && !std::filesystem::is_directory(dir, ec))
      throw UsageError(fmt::format("launch: {} {} is an existing file, not a directory; give a directory", flag, dir));
  }
  const MadeDirectories made(opt.heartbeat_dir, job.options().save);
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGTERM, SIGUSR1, SIGINT}) ::sigaction(sig, &sa, nullptr);
  return Supervisor(std::move(opt), std::move(job)).run();
}

}  // namespace occ::cmd
