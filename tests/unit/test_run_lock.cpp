// One job per run folder: train/run_lock.h.
#include "train/run_lock.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "temp_dir.h"

namespace occ {
namespace {

using test::TempDir;

std::string lock_file(const TempDir& dir) { return dir.str() + "/" + RunLock::file_name(); }

TEST(RunLock, ASecondHolderIsRefusedNamingTheFirst) {
  TempDir dir;
  RunLock first = RunLock::acquire(dir.str(), "optimus-cc launch");
  ASSERT_TRUE(first.held());
  // flock(2) locks belong to an open file description: a second acquire in this process conflicts too.
  try {
    RunLock::acquire(dir.str(), "optimus-cc train");
    FAIL() << "a second holder was not refused";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("is in use by optimus-cc launch (pid " + std::to_string(getpid())), std::string::npos) << what;
  }
}

TEST(RunLock, TheHoldersJobUsesTheFolderByItsToken) {
  TempDir dir;
  RunLock supervisor = RunLock::acquire(dir.str(), "optimus-cc launch");
  RunLock job = RunLock::acquire(dir.str(), "optimus-cc train", supervisor.token());
  EXPECT_FALSE(job.held());  // nothing taken: the supervisor holds it
  EXPECT_THROW(RunLock::acquire(dir.str(), "optimus-cc train", "another:1:2"), Error);
}

TEST(RunLock, ReleaseRemovesTheFileAndFreesTheFolder) {
  TempDir dir;
  { RunLock lock = RunLock::acquire(dir.str(), "optimus-cc train"); }
  EXPECT_FALSE(std::filesystem::exists(lock_file(dir)));
  RunLock again = RunLock::acquire(dir.str(), "optimus-cc train");
  EXPECT_TRUE(again.held());
}

TEST(RunLock, ADeadHoldersLockDoesNotBlock) {
  TempDir dir;
  const pid_t child = fork();
  if (child == 0) {
    RunLock lock = RunLock::acquire(dir.str(), "optimus-cc launch");
    _exit(lock.held() ? 0 : 1);  // dies holding it: the file stays, the flock goes
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_TRUE(std::filesystem::exists(lock_file(dir)));
  RunLock lock = RunLock::acquire(dir.str(), "optimus-cc train");
  EXPECT_TRUE(lock.held());
  std::ifstream in(lock_file(dir));
  std::string token, holder;
  std::getline(in, token);
  std::getline(in, holder);
  EXPECT_EQ(token, lock.token());
  EXPECT_EQ(holder.rfind("optimus-cc train (pid " + std::to_string(getpid()), 0), 0u) << holder;
}

}  // namespace
}  // namespace occ
