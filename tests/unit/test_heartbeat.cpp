// The ranks' heartbeat files and how `optimus-cc launch` reads them.
#include "core/heartbeat.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "apps/commands/hang_watch.h"
#include "core/timer.h"
#include "temp_dir.h"

namespace occ {
namespace {

using test::TempDir;

heartbeat::Snapshot read_rank(const std::string& dir, int rank) {
  auto s = heartbeat::read(heartbeat::file_path(dir, rank));
  EXPECT_TRUE(s.has_value());
  return s.value_or(heartbeat::Snapshot{});
}

// stop() even when an expectation fails midway (one heartbeat per process).
struct Session {
  Session(const std::string& dir, int rank, int world) { heartbeat::start(dir, rank, world); }
  ~Session() { heartbeat::stop(); }
};

TEST(Heartbeat, RecordsWhereEachThreadIs) {
  TempDir dir;
  EXPECT_FALSE(heartbeat::read(heartbeat::file_path(dir.str(), 3)).has_value());
  {
    Session session(dir.str(), 3, 8);
    heartbeat::Snapshot s = read_rank(dir.str(), 3);
    EXPECT_EQ(s.rank, 3);
    EXPECT_EQ(s.world_size, 8);
    EXPECT_EQ(s.pid, int(getpid()));
    EXPECT_EQ(s.state, heartbeat::State::Starting);
    EXPECT_TRUE(s.busy);
    EXPECT_EQ(s.busy_what, "start-up");

    heartbeat::training_started();
    heartbeat::begin_iteration(5);
    heartbeat::phase("forward", 2, 1);
    s = read_rank(dir.str(), 3);
    EXPECT_EQ(s.state, heartbeat::State::Training);
    EXPECT_FALSE(s.busy);
    EXPECT_EQ(s.main.iteration, 5);
    EXPECT_EQ(s.main.phase, "forward");
    EXPECT_EQ(s.main.micro_batch, 2);
    EXPECT_EQ(s.main.chunk, 1);
    EXPECT_FALSE(s.main.waiting);

    const uint64_t before = s.progress;
    heartbeat::begin_wait("forward activations", "pipeline", 2);
    s = read_rank(dir.str(), 3);
    EXPECT_TRUE(s.main.waiting);
    EXPECT_EQ(s.main.wait_what, "forward activations");
    EXPECT_EQ(s.main.group, "pipeline");
    EXPECT_EQ(s.main.peer, 2);
    EXPECT_EQ(s.main.phase, "forward");  // the phase stays; the wait is beside it
    heartbeat::end_wait();
    heartbeat::end_iteration(5);
    s = read_rank(dir.str(), 3);
    EXPECT_FALSE(s.main.waiting);
    EXPECT_EQ(s.iterations_done, 5);
    EXPECT_GE(s.progress, before + 3);  // every change is progress

    // Another thread (the data-parallel reducer) fills the background activity.
    std::thread([] {
      heartbeat::phase("bucket all-reduce");
      heartbeat::begin_wait("a reduce-scatter step", "data-parallel", 1);
    }).join();
    s = read_rank(dir.str(), 3);
    EXPECT_EQ(s.background.phase, "bucket all-reduce");
    EXPECT_TRUE(s.background.waiting);
    EXPECT_EQ(s.background.peer, 1);
    EXPECT_EQ(s.main.phase, "forward");

    {
      heartbeat::Busy outer("checkpoint snapshot");
      {
        heartbeat::Busy inner("checkpoint write");
        EXPECT_EQ(read_rank(dir.str(), 3).busy_what, "checkpoint write");
        heartbeat::busy_text("checkpoint write: 120 MB");  // its progress, while it lasts
        EXPECT_EQ(read_rank(dir.str(), 3).busy_what, "checkpoint write: 120 MB");
        std::thread([] { heartbeat::busy_text("not the main thread"); }).join();  // ignored
        EXPECT_EQ(read_rank(dir.str(), 3).busy_what, "checkpoint write: 120 MB");
      }
      s = read_rank(dir.str(), 3);
      EXPECT_TRUE(s.busy);
      EXPECT_EQ(s.busy_what, "checkpoint snapshot");
    }
    EXPECT_FALSE(read_rank(dir.str(), 3).busy);

    // The liveness thread ticks twice a second.
    const uint64_t alive = read_rank(dir.str(), 3).alive;
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    EXPECT_GE(read_rank(dir.str(), 3).alive, alive + 1);

    heartbeat::fail("disk full");
    heartbeat::fail("");  // a later silent report keeps the words
    s = read_rank(dir.str(), 3);
    EXPECT_EQ(s.state, heartbeat::State::Failed);
    EXPECT_EQ(s.message, "disk full");
    EXPECT_FALSE(s.failed_at_startup);
  }
  EXPECT_EQ(read_rank(dir.str(), 3).state, heartbeat::State::Failed);  // stop() keeps a failure

  {
    Session session(dir.str(), 3, 8);  // restarted: a fresh file
    heartbeat::fail("bad flag");
    const heartbeat::Snapshot s = read_rank(dir.str(), 3);
    EXPECT_TRUE(s.failed_at_startup);
    EXPECT_EQ(s.iterations_done, 0);
  }
  {
    Session session(dir.str(), 0, 1);
  }
  EXPECT_EQ(read_rank(dir.str(), 0).state, heartbeat::State::Done);
}

TEST(Heartbeat, AnUpdateCostsNanoseconds) {
  TempDir dir;
  Session session(dir.str(), 0, 1);
  constexpr int kUpdates = 200000;
  const double start = now_seconds();
  for (int i = 0; i < kUpdates; ++i) {
    heartbeat::begin_wait("forward activations", "pipeline", 1);
    heartbeat::end_wait();
  }
  const double ns = (now_seconds() - start) / (2.0 * kUpdates) * 1e9;
  std::printf("heartbeat update: %.1f ns\n", ns);
  // A step makes ~100 of them per rank: well under a microsecond each is nothing next to it.
  EXPECT_LT(ns, 1000.0);
  EXPECT_EQ(read_rank(dir.str(), 0).progress, uint64_t(2 * kUpdates + 0));
}

TEST(Heartbeat, DoesNothingWhenNotStarted) {
  EXPECT_FALSE(heartbeat::active());
  heartbeat::phase("forward", 0, 0);
  heartbeat::begin_wait("x", "pipeline", 1);
  heartbeat::end_wait();
  heartbeat::fail("x");
  heartbeat::Busy busy("x");
  EXPECT_FALSE(heartbeat::active());
}

TEST(HangWatch, HungOnlyWhenNothingMovesAndNoBusyRankIsAlive) {
  TempDir dir;
  const std::string hb = dir / "heartbeat";
  cmd::HangWatch watch(hb, 0.3);
  watch.reset();
  watch.poll(now_seconds());
  EXPECT_FALSE(watch.any_rank_started());
  Session session(hb, 0, 1);
  heartbeat::training_started();
  heartbeat::begin_iteration(1);
  watch.poll(now_seconds());  // every rank has a heartbeat: the clock starts
  EXPECT_TRUE(watch.any_rank_started());
  EXPECT_FALSE(watch.hung(now_seconds()));
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  watch.poll(now_seconds());
  EXPECT_TRUE(watch.hung(now_seconds()));

  heartbeat::phase("forward", 3);  // progress
  watch.poll(now_seconds());
  EXPECT_FALSE(watch.hung(now_seconds()));

  heartbeat::begin_wait("backward gradients", "pipeline (gradients 1>0)", 1);
  watch.poll(now_seconds());  // (the wait's start is progress too)
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  watch.poll(now_seconds());
  EXPECT_TRUE(watch.hung(now_seconds()));
  const auto lines = watch.describe(now_seconds());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("rank 0 (pid "), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("waiting"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("backward gradients (pipeline (gradients 1>0) group, from/to rank 1)"), std::string::npos)
      << lines[0];
  EXPECT_NE(lines[0].find("forward of micro-batch 3 in iteration 1"), std::string::npos) << lines[0];
  heartbeat::end_wait();

  {
    // Long local work (a checkpoint write): no progress steps, but alive.
    heartbeat::Busy busy("checkpoint write");
    for (int i = 0; i < 5; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      watch.poll(now_seconds());
      EXPECT_FALSE(watch.hung(now_seconds())) << i;
    }
    // Busy, but waiting for the others (the save agreement, no timeout): not work of its own.
    // With no writer alive to move, that is a hang (a writer stopped by SIGSTOP).
    heartbeat::begin_wait("an agreement (no timeout)", "world", -1);
    watch.poll(now_seconds());  // (the wait's start is progress)
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    watch.poll(now_seconds());
    EXPECT_TRUE(watch.hung(now_seconds()));
    heartbeat::end_wait();
  }
  heartbeat::end_iteration(1);
  heartbeat::fail("out of memory");
  watch.poll(now_seconds());
  EXPECT_EQ(watch.iterations_done(), 1);
  EXPECT_EQ(watch.reported_failure(), "out of memory");
  EXPECT_FALSE(watch.failed_at_startup());

  cmd::HangWatch off(hb, 0);  // --hang-timeout 0
  off.poll(now_seconds());
  EXPECT_FALSE(off.hung(now_seconds() + 1e6));
}

// Where the supervisor counts from: the iteration the ranks loaded, and the one a failure is in.
TEST(HangWatch, TellsTheIterationLoadedAndTheOneBegun) {
  TempDir dir;
  const std::string hb = dir / "heartbeat";
  cmd::HangWatch watch(hb, 0);
  watch.reset();
  Session session(hb, 0, 1);
  watch.poll(now_seconds());
  EXPECT_FALSE(watch.resumed_from().has_value());
  EXPECT_FALSE(watch.reached_training());
  heartbeat::training_started(5);  // loaded iteration 5
  heartbeat::begin_iteration(6);
  watch.poll(now_seconds());
  EXPECT_EQ(watch.resumed_from(), std::optional<int64_t>(5));
  EXPECT_EQ(watch.iterations_done(), 5);
  EXPECT_EQ(watch.iteration_begun(), 6);  // a failure now is in iteration 6
  heartbeat::fail("x");
  watch.poll(now_seconds());
  EXPECT_TRUE(watch.reached_training());  // (kept once it failed or ended)
}

}  // namespace
}  // namespace occ
