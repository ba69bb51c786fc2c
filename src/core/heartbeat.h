#pragma once
// A rank's heartbeat: where it is (the iteration, the micro-batch, the phase,
// the operation it waits on and for which peer), in one small file per rank
// that `optimus-cc launch` reads to tell a hang from slow progress and to say
// where each rank waits (apps/commands/launch.cpp).
//
// The file is memory-mapped and updated by plain stores into the page (no
// system call), so an update costs a few nanoseconds and a step nothing
// measurable. A reader on the same host sees each store at once (one page
// cache); a reader on another host of a shared file system sees the page
// after the kernel writes it back (dirty_expire_centisecs, 30 s by default).
//
// Progress is a counter that every phase change and every finished wait
// bumps: a job whose counters all stand still for the hang timeout is hung.
// Long local work without such steps (start-up, loading or writing a
// checkpoint) runs inside a Busy scope: the rank then counts as progressing
// while its liveness counter, bumped twice a second by a thread of its own,
// moves; a stopped (SIGSTOP) or frozen process stops that thread too.
//
// Writers: the thread that called start() fills the main activity, any other
// thread (the data-parallel reducer, the parameter all-gather) the background
// one. Every setter is a no-op (one branch) when no heartbeat was started.
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace occ::heartbeat {

enum class State : uint32_t { Starting = 0, Training = 1, Done = 2, Failed = 3 };
const char* state_name(State s);

// What one thread is doing, copied out of the file by read().
struct Activity {
  int64_t iteration = 0;    // the iteration in progress (1-based; 0 before the first)
  int32_t micro_batch = -1, chunk = -1;
  std::string phase;        // "forward", "backward", "optimizer", "checkpoint save", ...
  // The last network wait: what, in which process group, for which world rank
  // (-1: none or unknown); `waiting` while it lasts.
  std::string wait_what, group;
  int32_t peer = -1;
  bool waiting = false;
};

// The whole record of one rank, as read().
struct Snapshot {
  int rank = -1, world_size = 0, pid = 0;
  std::string host;
  State state = State::Starting;
  uint64_t progress = 0, alive = 0;
  bool busy = false;
  std::string busy_what;               // the long phase (with busy)
  int64_t iterations_done = 0;         // the last iteration this rank completed (or loaded)
  bool reached_training = false;       // training_started() was called (it may be Done now)
  int64_t resumed_from = -1;           // the iteration it loaded (0: none) once it reached training; -1 before
  Activity main, background;
  bool failed_at_startup = false;      // with State::Failed: before the first iteration
  std::string message;                 // with State::Failed: the error
};

// The file of `rank` in `dir`: DIR/rank_NNNNN.
std::string file_path(const std::string& dir, int rank);
// Reads one heartbeat file (a consistent copy: retried while a writer is in
// the middle of an update); nullopt when the file is missing or not a heartbeat.
std::optional<Snapshot> read(const std::string& path);

// ---- the writing side: one heartbeat per process -----------------------------

// Creates (or replaces) DIR/rank_NNNNN, maps it and starts the liveness
// thread; throws occ::Error naming the path when it cannot. The process starts
// in State::Starting, inside a Busy("start-up") phase ended by training_started().
void start(const std::string& dir, int rank, int world_size);
// Marks the record Done (unless it failed), stops the thread, unmaps the file.
void stop();
bool active();

// The iteration in progress (the main thread, at the start of each iteration).
void begin_iteration(int64_t iteration);
void end_iteration(int64_t iteration);  // completed
// Ends the start-up phase; `resumed_from`: the iteration the rank loaded (0: none),
// which counts as done.
void training_started(int64_t resumed_from = 0);
// The current phase of the calling thread (a static string: copied).
void phase(const char* name, int micro_batch = -1, int chunk = -1);
// A network wait of the calling thread: `what` (static), the group's name and
// the world rank of the peer (-1 for none); end_wait() when it is over.
void begin_wait(const char* what, const std::string& group, int peer_world_rank);
void end_wait();
// The failure this process reports (its own words; "" when another rank
// reports the job's). Before training_started() it is a start-up failure: a
// bad flag, path or checkpoint, which a restart would meet again.
void fail(const std::string& message);

// Long local work (see above). Nests.
// busy_text: what the innermost Busy scope of the main thread shows, replaced
// while it lasts (its progress: "checkpoint write: 120/800 MB"); a no-op on
// other threads and outside a Busy scope.
void busy_text(const std::string& text);
class Busy {
 public:
  explicit Busy(const char* what);
  ~Busy();
  Busy(const Busy&) = delete;
  Busy& operator=(const Busy&) = delete;

 private:
  bool active_;
  const char* previous_;  // the enclosing scope's phase, shown again when this one ends
};

}  // namespace occ::heartbeat
