#include "core/heartbeat.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "core/error.h"

namespace occ::heartbeat {

namespace {

// The file's layout (one page). Shared between processes: the atomics must be
// lock-free, so that they are address-free too.
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free);

constexpr char kMagic[8] = {'O', 'C', 'C', 'B', 'E', 'A', 'T', '1'};
constexpr size_t kFileBytes = 4096;

// One thread's activity, written under a sequence lock: odd while an update is
// in progress, so a reader retries rather than copy half of two updates.
struct RawActivity {
  std::atomic<uint32_t> seq;
  int32_t micro_batch, chunk, peer;
  int64_t iteration;
  uint32_t waiting;
  char phase[32];
  char wait_what[64];
  char group[48];
};

struct RawRecord {
  char magic[8];
  uint32_t version;
  int32_t rank, world_size, pid;
  char host[64];
  std::atomic<uint32_t> state;
  std::atomic<uint32_t> failed_at_startup;
  std::atomic<uint64_t> progress;
  std::atomic<uint64_t> alive;
  std::atomic<int64_t> iterations_done;
  std::atomic<uint32_t> busy_seq;  // sequence lock of busy / busy_what
  int32_t busy;
  char busy_what[40];
  RawActivity main, background;
  std::atomic<uint32_t> message_seq;
  char message[1024];
  std::atomic<uint32_t> reached_training;
  std::atomic<int64_t> resumed_from;  // -1 until training_started()
};
static_assert(sizeof(RawRecord) <= kFileBytes);

void copy_text(char* dst, size_t size, const char* src) {
  size_t i = 0;
  if (src)
    for (; i + 1 < size && src[i]; ++i) dst[i] = src[i];
  dst[i] = '\0';
}

std::string text_of(const char* src, size_t size) { return std::string(src, strnlen(src, size)); }

// Writes under a sequence lock (one writer at a time per lock).
template <class Fill>
void locked_write(std::atomic<uint32_t>& seq, Fill&& fill) {
  const uint32_t s = seq.load(std::memory_order_relaxed);
  seq.store(s + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  fill();
  seq.store(s + 2, std::memory_order_release);
}

// Copies under a sequence lock; false when the writer kept it busy.
template <class Copy>
bool locked_read(const std::atomic<uint32_t>& seq, Copy&& copy) {
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const uint32_t before = seq.load(std::memory_order_acquire);
    if (before & 1) {
      std::this_thread::yield();
      continue;
    }
    copy();
    std::atomic_thread_fence(std::memory_order_acquire);
    if (seq.load(std::memory_order_relaxed) == before) return true;
  }
  return false;
}

// ---- this process's heartbeat --------------------------------------------------

std::atomic<RawRecord*> g_record{nullptr};
thread_local bool t_main = false;  // the thread that called start()
std::atomic_flag g_background_lock = ATOMIC_FLAG_INIT;  // several background threads share one activity
const char* g_busy_what = nullptr;

struct Liveness {
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::thread thread;
};
Liveness* g_liveness = nullptr;

// Runs `fill` on the calling thread's activity.
template <class Fill>
void update_activity(Fill&& fill) {
  RawRecord* r = g_record.load(std::memory_order_relaxed);
  if (!r) return;
  if (t_main) {
    locked_write(r->main.seq, [&] { fill(r->main); });
  } else {
    while (g_background_lock.test_and_set(std::memory_order_acquire)) std::this_thread::yield();
    locked_write(r->background.seq, [&] { fill(r->background); });
    g_background_lock.clear(std::memory_order_release);
  }
  r->progress.fetch_add(1, std::memory_order_relaxed);
}

void set_busy(int delta, const char* what) {
  RawRecord* r = g_record.load(std::memory_order_relaxed);
  locked_write(r->busy_seq, [&] {
    r->busy += delta;
    copy_text(r->busy_what, sizeof r->busy_what, r->busy > 0 ? what : "");
  });
  r->progress.fetch_add(1, std::memory_order_relaxed);
}

Activity activity_of(const RawActivity& a) {
  Activity out;
  out.iteration = a.iteration;
  out.micro_batch = a.micro_batch;
  out.chunk = a.chunk;
  out.peer = a.peer;
  out.waiting = a.waiting != 0;
  out.phase = text_of(a.phase, sizeof a.phase);
  out.wait_what = text_of(a.wait_what, sizeof a.wait_what);
  out.group = text_of(a.group, sizeof a.group);
  return out;
}

}  // namespace

const char* state_name(State s) {
  switch (s) {
    case State::Starting: return "starting";
    case State::Training: return "training";
    case State::Done: return "done";
    case State::Failed: return "failed";
  }
  return "?";
}

std::string file_path(const std::string& dir, int rank) {
  return (std::filesystem::path(dir) / fmt::format("rank_{:05d}", rank)).string();
}

std::optional<Snapshot> read(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  void* map = MAP_FAILED;
  if (::fstat(fd, &st) == 0 && size_t(st.st_size) >= kFileBytes)
    map = ::mmap(nullptr, kFileBytes, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return std::nullopt;
  const RawRecord& r = *static_cast<const RawRecord*>(map);
  std::optional<Snapshot> out;
  if (std::memcmp(r.magic, kMagic, sizeof kMagic) == 0) {
    std::atomic_thread_fence(std::memory_order_acquire);
    Snapshot s;
    s.rank = r.rank;
    s.world_size = r.world_size;
    s.pid = r.pid;
    s.host = text_of(r.host, sizeof r.host);
    s.state = State(r.state.load(std::memory_order_acquire));
    s.failed_at_startup = r.failed_at_startup.load(std::memory_order_acquire) != 0;
    s.progress = r.progress.load(std::memory_order_acquire);
    s.alive = r.alive.load(std::memory_order_acquire);
    s.iterations_done = r.iterations_done.load(std::memory_order_acquire);
    s.reached_training = r.reached_training.load(std::memory_order_acquire) != 0;
    s.resumed_from = r.resumed_from.load(std::memory_order_acquire);
    bool ok = locked_read(r.busy_seq, [&] {
      s.busy = r.busy > 0;
      s.busy_what = text_of(r.busy_what, sizeof r.busy_what);
    });
    ok = ok && locked_read(r.main.seq, [&] { s.main = activity_of(r.main); });
    ok = ok && locked_read(r.background.seq, [&] { s.background = activity_of(r.background); });
    ok = ok && locked_read(r.message_seq, [&] { s.message = text_of(r.message, sizeof r.message); });
    if (ok) out = std::move(s);
  }
  ::munmap(map, kFileBytes);
  return out;
}

void start(const std::string& dir, int rank, int world_size) {
  OCC_CHECK(!g_record.load(), "internal: heartbeat started twice");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) occ::fail("cannot create the heartbeat directory {}: {}; check that it is writable", dir, ec.message());
  const std::string path = file_path(dir, rank);
  ::unlink(path.c_str());  // a new inode: a process of an earlier attempt that still maps the old one cannot write here
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) occ::fail("cannot create heartbeat file {}: {}; check that the directory is writable", path, std::strerror(errno));
  void* map = MAP_FAILED;
  if (::ftruncate(fd, off_t(kFileBytes)) == 0) map = ::mmap(nullptr, kFileBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);
  if (map == MAP_FAILED) occ::fail("cannot map heartbeat file {}: {}; check the disk", path, std::strerror(err));
  RawRecord* r = new (map) RawRecord{};  // the file is zeroed: this only starts the objects' lifetimes
  r->version = 1;
  r->rank = rank;
  r->world_size = world_size;
  r->pid = int32_t(::getpid());
  char host[64] = {};
  ::gethostname(host, sizeof host - 1);
  copy_text(r->host, sizeof r->host, host);
  r->main.peer = r->background.peer = -1;
  r->main.micro_batch = r->background.micro_batch = -1;
  r->main.chunk = r->background.chunk = -1;
  r->busy = 1;
  copy_text(r->busy_what, sizeof r->busy_what, "start-up");
  r->resumed_from.store(-1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(r->magic, kMagic, sizeof kMagic);  // last: a reader never sees a half-made record
  g_record.store(r);
  g_busy_what = "start-up";
  t_main = true;
  g_liveness = new Liveness;
  g_liveness->thread = std::thread([l = g_liveness, r] {
    std::unique_lock<std::mutex> lock(l->mu);
    while (!l->cv.wait_for(lock, std::chrono::milliseconds(500), [l] { return l->stop; }))
      r->alive.fetch_add(1, std::memory_order_relaxed);
  });
}

void stop() {
  RawRecord* r = g_record.load();
  if (!r) return;
  if (r->state.load() != uint32_t(State::Failed)) r->state.store(uint32_t(State::Done), std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(g_liveness->mu);
    g_liveness->stop = true;
  }
  g_liveness->cv.notify_all();
  g_liveness->thread.join();
  delete g_liveness;
  g_liveness = nullptr;
  g_record.store(nullptr);
  ::munmap(r, kFileBytes);
}

bool active() { return g_record.load(std::memory_order_relaxed) != nullptr; }

void begin_iteration(int64_t iteration) {
  update_activity([&](RawActivity& a) {
    a.iteration = iteration;
    a.micro_batch = a.chunk = -1;
    a.waiting = 0;
    copy_text(a.phase, sizeof a.phase, "iteration start");
  });
}

void end_iteration(int64_t iteration) {
  if (RawRecord* r = g_record.load(std::memory_order_relaxed)) {
    r->iterations_done.store(iteration, std::memory_order_release);
    r->progress.fetch_add(1, std::memory_order_relaxed);
  }
}

void training_started(int64_t resumed_from) {
  RawRecord* r = g_record.load(std::memory_order_relaxed);
  if (!r) return;
  r->iterations_done.store(resumed_from, std::memory_order_relaxed);
  r->resumed_from.store(resumed_from, std::memory_order_relaxed);
  r->reached_training.store(1, std::memory_order_relaxed);
  r->state.store(uint32_t(State::Training), std::memory_order_release);
  locked_write(r->busy_seq, [&] {
    r->busy = 0;
    r->busy_what[0] = '\0';
  });
  r->progress.fetch_add(1, std::memory_order_relaxed);
}

void phase(const char* name, int micro_batch, int chunk) {
  update_activity([&](RawActivity& a) {
    a.micro_batch = micro_batch;
    a.chunk = chunk;
    a.waiting = 0;
    copy_text(a.phase, sizeof a.phase, name);
  });
}

void begin_wait(const char* what, const std::string& group, int peer_world_rank) {
  update_activity([&](RawActivity& a) {
    a.peer = peer_world_rank;
    a.waiting = 1;
    copy_text(a.wait_what, sizeof a.wait_what, what);
    copy_text(a.group, sizeof a.group, group.c_str());
  });
}

void end_wait() {
  update_activity([&](RawActivity& a) { a.waiting = 0; });
}

void fail(const std::string& message) {
  RawRecord* r = g_record.load(std::memory_order_relaxed);
  if (!r) return;
  const uint32_t state = r->state.load(std::memory_order_relaxed);
  if (state == uint32_t(State::Failed) && message.empty()) return;  // keep the words said first
  locked_write(r->message_seq, [&] { copy_text(r->message, sizeof r->message, message.c_str()); });
  if (state != uint32_t(State::Failed))
    r->failed_at_startup.store(state == uint32_t(State::Starting) ? 1 : 0, std::memory_order_relaxed);
  r->state.store(uint32_t(State::Failed), std::memory_order_release);
}

void busy_text(const std::string& text) {
  RawRecord* r = g_record.load(std::memory_order_relaxed);
  if (!r || !t_main) return;  // (the main thread is the busy fields' one writer)
  locked_write(r->busy_seq, [&] {
    if (r->busy > 0) copy_text(r->busy_what, sizeof r->busy_what, text.c_str());
  });
}

Busy::Busy(const char* what) : active_(active() && t_main), previous_(g_busy_what) {
  if (!active_) return;
  g_busy_what = what;
  set_busy(+1, what);
}

Busy::~Busy() {
  if (!active_ || !active()) return;
  g_busy_what = previous_;
  set_busy(-1, previous_);
}

}  // namespace occ::heartbeat
