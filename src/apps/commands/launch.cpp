// `optimus-cc launch [--max-restarts N] [--restart-backoff S] [--hang-timeout S]
//  -- mpirun ... optimus-cc train ...`: runs a training job to its end without a
// person. When the job fails (a non-zero exit, a rank killed by a signal, a hang
// seen in the ranks' heartbeats) it is restarted from the newest checkpoint
// under its --save that verifies, up to N times, each time saying why, in which
// iteration, and how many iterations were lost. A failure that would repeat (a
// start-up error: a bad flag, an unwritable path, a refused checkpoint; or the
// same failure in the same iteration twice) ends it with that error. SIGTERM,
// SIGUSR1, SIGINT or SIGHUP to the supervisor reach the ranks as the graceful
// stop of --exit-signal-handler (a checkpoint, exit 0), and the supervisor
// exits 0 after it; SIGQUIT ends the job at once (launch_signals.h).
//
// One supervisor per run folder: it holds --save's lock (train/run_lock.h) and
// hands its token to its own job.
//
// Why a supervisor process around the launcher rather than restarts inside
// the job: a rank killed by a signal or hung in a collective takes MPI's job
// with it, and only a process outside that job can start a new one.
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
#include <optional>
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
#include "apps/commands/job_process.h"
#include "apps/commands/launch_front.h"
#include "apps/commands/launch_signals.h"
#include "core/error.h"
#include "core/timer.h"
#include "train/checkpoint_store.h"
#include "train/checkpoint_verify.h"
#include "train/run_lock.h"

namespace occ::cmd {

namespace {

namespace signals = launch_signals;

// A stop signal the job has not been seen to be ready for (no heartbeat of
// every rank: e.g. a --heartbeat-dir this host does not share) is passed on
// after this long: the ranks install their handler first thing, so it is safe
// once they run at all.
constexpr double kForwardGraceS = 5;

void say(const std::string& line) {
  std::printf("launch: %s\n", line.c_str());
  std::fflush(stdout);
}

std::string signal_text(int sig) { return fmt::format("signal {} ({})", sig, strsignal(sig)); }

std::string quoted(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) {
    const bool plain = !a.empty() && a.find_first_of(" \t'\"\\$`;&|<>()*?") == std::string::npos;
    s += (s.empty() ? "" : " ") + (plain ? a : "'" + a + "'");
  }
  return s;
}

std::string plural(int64_t n, const char* word) { return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s"); }

bool stop_asked() { return signals::graceful_count() > 0 || signals::at_once() != 0; }

// Sleeps up to `seconds`, returning early when a stop signal arrives.
void pause_unless_stopped(double seconds) {
  const double until = now_seconds() + seconds;
  while (now_seconds() < until && !stop_asked()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

struct Outcome {
  enum Kind { Exited, Signaled, Hung, EndedAtOnce } kind = Exited;
  int code = 0;  // exit status, or signal
  // The supervisor's exit status for it.
  int status() const { return kind == Exited ? code : kind == Hung ? 1 : 128 + code; }
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
        made_(opt_.heartbeat_dir, save_),
        watch_(opt_.heartbeat_dir, opt_.hang_timeout_s) {}
  ~Supervisor();

  int run();

 private:
  void lock_run_folder();
  Outcome run_attempt(const std::vector<std::string>& argv);
  void end_job(pid_t child);
  void end_job_at_once(pid_t child);
  void wait_until_ranks_gone();
  // What choosing `c` passed over (a damaged checkpoint, an unreadable marker), one line each.
  std::vector<std::string> passed_over(const ResumeChoice& c) const;
  std::string failure_text(const Outcome& o) const;
  // The iteration the user's own --load starts from (0: none; that of its --ckpt-step, or its newest).
  int64_t user_load_iteration() const;
  std::string resume_text(const ResumeChoice& c) const;

  LaunchOptions opt_;
  JobCommand job_;
  std::string save_;
  // What this supervisor created (a folder nothing was saved in is not left behind: a job
  // refused at start-up, or one that never trained). Declared before lock_: the lock's file
  // goes first, then the folders, while empty.
  MadeDirectories made_;
  HangWatch watch_;
  RunLock lock_;
};

Supervisor::~Supervisor() { lock_ = RunLock{}; }  // (removes its file; made_ then removes what it created)

void Supervisor::lock_run_folder() {
  std::error_code ec;
  std::filesystem::create_directories(save_, ec);
  if (ec) fail("launch: cannot create --save directory {}: {}; give a directory that can be written", save_, ec.message());
  try {
    lock_ = RunLock::acquire(save_, "optimus-cc launch");
  } catch (const Error& e) {
    made_.dismiss();  // (the folder is another supervisor's, created at the same moment, perhaps)
    fail("launch: --save {}", e.what());
  }
}

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
  if (o.kind == Outcome::EndedAtOnce) return fmt::format("ended at once by {} to the supervisor", signal_text(o.code));
  if (o.kind == Outcome::Signaled) return fmt::format("the launched command was killed by {}", signal_text(o.code));
  if (!reported.empty()) return reported;
  if (o.code > 128 && o.code < 128 + 65)
    return fmt::format("a rank was killed by {} (exit status {})", signal_text(o.code - 128), o.code);
  return fmt::format("the job exited with status {}", o.code);
}

int64_t Supervisor::user_load_iteration() const {
  const TrainOptions& train = job_.options();
  if (train.load.empty()) return 0;
  if (train.ckpt_step >= 0) return train.ckpt_step;
  return CheckpointStore(train.load).latest().value_or(0);
}

std::string Supervisor::resume_text(const ResumeChoice& c) const {
  if (c.iteration) return fmt::format("{}/iter_{:07d}", save_, *c.iteration);
  const TrainOptions& train = job_.options();
  if (train.load.empty() || user_load_iteration() == 0) return "the beginning";
  return fmt::format("--load {} (iteration {})", train.load, user_load_iteration());
}

void Supervisor::end_job(pid_t child) {
  // Ranks on this host at once (a stopped process takes SIGKILL too); the
  // launcher then ends the others, or its own SIGTERM does.
  for (pid_t pid : local_rank_pids(watch_.ranks())) ::kill(pid, SIGKILL);
  ::kill(child, SIGTERM);
}

void Supervisor::end_job_at_once(pid_t child) {
  // Two stop signals: the ranks' --exit-signal-handler exits at the second (one
  // still starting dies of the first); the launcher's own SIGTERM then ends any
  // left (mpirun kills its ranks a few seconds after it).
  for (pid_t pid : local_rank_pids(watch_.ranks())) ::kill(pid, SIGKILL);
  for (int sig : {SIGUSR1, SIGUSR1, SIGTERM}) {
    ::kill(child, sig);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // (signals to one process do not queue)
  }
}

Outcome Supervisor::run_attempt(const std::vector<std::string>& argv) {
  watch_.reset();
  const pid_t child = spawn(argv);
  signals::watch_job(child);
  // Whatever ends this attempt (an exception included), the job does not outlive it.
  struct JobGuard {
    pid_t child;
    bool running = true;
    ~JobGuard() {
      if (running) signals::kill_watched();
      signals::watch_job(0);
      signals::watch_ranks({});
      if (running) ::waitpid(child, nullptr, 0);
    }
  } guard{child};
  int forwarded = 0;
  bool hung = false, held = false;
  int ended_at_once = 0;
  double ending_at = 0, signal_at = 0;
  const double poll_every = std::clamp(opt_.hang_timeout_s / 10, 0.1, 1.0);
  const double started = now_seconds();
  double polled_at = 0;
  bool noted_missing = false;
  for (;;) {
    int status = 0;
    const pid_t done = ::waitpid(child, &status, WNOHANG);
    if (done == child) {
      guard.running = false;
      watch_.poll(now_seconds());  // the ranks' last words
      if (ended_at_once) return {Outcome::EndedAtOnce, ended_at_once};
      if (hung) return {Outcome::Hung, 0};
      if (WIFSIGNALED(status)) return {Outcome::Signaled, WTERMSIG(status)};
      return {Outcome::Exited, WEXITSTATUS(status)};
    }
    if (done < 0 && errno != EINTR) fail("launch: waitpid: {}", std::strerror(errno));
    const double now = now_seconds();
    if (!ended_at_once && signals::at_once() != 0) {
      ended_at_once = signals::at_once();
      ending_at = now;
      say(fmt::format("{}: ending the job at once, without a checkpoint", signal_text(ended_at_once)));
      end_job_at_once(child);
    }
    // Each stop signal to the supervisor becomes one SIGUSR1 to the launcher,
    // which passes it to every rank (mpirun does): the first stops gracefully,
    // a second at once (--exit-signal-handler). A rank installs that handler
    // first thing, before its heartbeat: once every rank has one, the signal is
    // safe; without them (a heartbeat directory this host does not see), after
    // a short grace for the launcher to start them.
    if (forwarded < signals::graceful_count() && signal_at == 0) signal_at = now;
    const bool ready = watch_.armed() || now - signal_at >= kForwardGraceS;
    if (forwarded < signals::graceful_count() && !ready && !held) {
      held = true;
      say(fmt::format("{}: the job is starting; passing it on once every rank runs (at most {:g} s)",
                      signal_text(signals::last_graceful()), kForwardGraceS));
    }
    while (forwarded < signals::graceful_count() && ready) {
      ++forwarded;
      ::kill(child, SIGUSR1);
      say(fmt::format("{}: {}", signal_text(signals::last_graceful()),
                      forwarded == 1 ? "asking the job to stop after this iteration, with a checkpoint"
                                     : "asking the job to stop at once"));
    }
    if (now - polled_at >= poll_every) {
      polled_at = now;
      watch_.poll(now);
      signals::watch_ranks(local_rank_pids(watch_.ranks()));
      if (!noted_missing && opt_.hang_timeout_s > 0 && watch_.any_rank_started() && !watch_.armed() &&
          now - started > 120) {
        noted_missing = true;  // e.g. a heartbeat directory that is not shared by every host
        say(fmt::format("note: after {:.0f} s only {} of {} ranks have a heartbeat in {}; hang detection waits for "
                        "all (on several hosts, pass --heartbeat-dir on a file system they all share)",
                        now - started, watch_.ranks_present(), watch_.world_size(), watch_.dir()));
      }
      if (!hung && !ended_at_once && watch_.hung(now)) {
        hung = true;
        ending_at = now;
        say(fmt::format("the job is hung: no rank progressed for {:g} s; ending it. Where each rank is:",
                        opt_.hang_timeout_s));
        for (const std::string& line : watch_.describe(now)) say("  " + line);
        end_job(child);
      }
    }
    if ((hung || ended_at_once) && now - ending_at > 15) ::kill(-child, SIGKILL);  // the launcher did not end it
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
  signals::install();
  lock_run_folder();
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
    if (stop_asked()) {
      say("stopped before the next attempt started");
      return signals::at_once() ? 128 + signals::at_once() : 0;
    }
    // Its own checkpoint: named by iteration every time (the user's --load and --ckpt-step named
    // where the run began), so that what is said here and what the job loads agree.
    JobCommand::Attempt a;
    a.heartbeat_dir = watch_.dir();
    a.run_lock_token = lock_.token();
    if (resume.iteration) {
      a.load = save_;
      a.resumes = true;
      a.ckpt_step = *resume.iteration;
    }
    const std::vector<std::string> argv = job_.argv_for(a);
    say(fmt::format("attempt {}: {}: {}", attempt,
                    // ("the beginning" for a --load with nothing in it yet: --save X --load X, Megatron's habit)
                    (resume.iteration ? "resuming from " : "from ") + resume_text(resume),
                    quoted(argv)));
    const int64_t asked_from = resume.iteration ? *resume.iteration : user_load_iteration();
    const Outcome outcome = run_attempt(argv);
    // Counted from the iteration the ranks loaded (what was asked, if no heartbeat says).
    const int64_t started_from = watch_.resumed_from().value_or(asked_from);
    const int64_t reached = std::max(watch_.iterations_done(), started_from);
    const int64_t begun = watch_.iteration_begun();
    wait_until_ranks_gone();
    if (outcome.kind == Outcome::Exited && outcome.code == 0) {
      const auto latest = CheckpointStore(save_).latest();
      // A job that exits 0 must have trained: a rank reached training, or it left a newer checkpoint.
      const bool trained = watch_.reached_training() || (latest && *latest > started_from) ||
                           (latest && train.train_iters > 0 && *latest >= train.train_iters);
      if (!trained) {
        std::fprintf(stderr, "error: launch: the job exited 0 without training: no rank reported training in %s and "
                     "no checkpoint was saved under %s; check that the command after -- runs optimus-cc train\n",
                     watch_.dir().c_str(), save_.c_str());
        return 1;
      }
      const std::string where = latest ? fmt::format("checkpoint {}/iter_{:07d}", save_, *latest) : "no checkpoint";
      if (signals::graceful_count() > 0)
        say(fmt::format("stopped by {}: the job saved {} and exited 0", signal_text(signals::last_graceful()), where));
      else
        say(fmt::format("the job finished at iteration {} of {} ({}) after {}, {} lost in all, in {:.0f} s", reached,
                        train.train_iters, where, plural(restarts, "restart"), plural(lost, "iteration"),
                        now_seconds() - start));
      return 0;
    }
    const std::string failure = failure_text(outcome);
    const int status = outcome.status() == 0 ? 1 : outcome.status();
    if (stop_asked()) {
      std::fprintf(stderr, "error: launch: the job ended with status %d after the stop signal: %s\n", status,
                   failure.c_str());
      return status;
    }
    // Where it failed: in the iteration under way, or between iterations (a save, an evaluation).
    const std::string at = begun > reached ? fmt::format("in iteration {}", begun)
                           : watch_.any_rank_started() && !watch_.reached_training()
                               ? std::string("at start-up")
                               : fmt::format("after iteration {}", reached);
    const bool started = watch_.any_rank_started();
    resume = choose_resume_checkpoint(save_);  // (one damaged since the attempt started is passed over here)
    const int64_t from = resume.iteration ? *resume.iteration : user_load_iteration();
    const bool same_checkpoint = from == asked_from;
    std::string verdict;
    // A start-up error repeats; so does a launcher that starts no rank (a wrong
    // path), unless it ended by a signal (a rank killed while starting).
    const bool killed = outcome.kind == Outcome::Signaled || (outcome.kind == Outcome::Exited && outcome.code > 128);
    if (((!started && !killed) || watch_.failed_at_startup()) && same_checkpoint)
      verdict = fmt::format("not restarting: the job failed {}, and a restart would fail the same way: {}",
                            started ? "at start-up" : "before any rank started", failure);
    else if (!failures_seen.insert(fmt::format("{} @ {}", failure, at)).second)
      verdict = fmt::format("not restarting: the same failure {} twice: {}", at, failure);
    else if (restarts >= opt_.max_restarts)
      verdict = fmt::format("giving up after {} (--max-restarts {}); the last failure, {}: {}",
                            plural(restarts, "restart"), opt_.max_restarts, at, failure);
    if (!verdict.empty()) {
      std::fprintf(stderr, "error: launch: %s\n", verdict.c_str());
      return status;
    }
    ++restarts;
    const int64_t lost_now = std::max<int64_t>(0, reached - from);
    lost += lost_now;
    stalled = from > started_from ? 0 : stalled + 1;  // the backoff grows while restarts gain nothing
    const double delay = opt_.restart_backoff_s * std::pow(2.0, std::min(stalled, 6) - (stalled > 0 ? 1 : 0));
    say(fmt::format("attempt {} failed {}: {}", attempt, at, failure));
    for (const std::string& line : passed_over(resume)) say(line);
    say(fmt::format("restart {} of {} in {:g} s from {}: {} lost", restarts, opt_.max_restarts, delay,
                    resume_text(resume), plural(lost_now, "iteration")));
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
  return Supervisor(std::move(opt), std::move(job)).run();
}

}  // namespace occ::cmd
