// How `optimus-cc launch` reads the job's command (apps/commands/job_command.h,
// shell_words.h): the train command found by its binary and inside sh -c, the
// flags it adds placed there, the launcher's world size and working directory.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "apps/commands/job_command.h"
#include "apps/commands/shell_words.h"
#include "core/error.h"

namespace occ {
namespace {

namespace fs = std::filesystem;
using Argv = std::vector<std::string>;

std::string error_of(const Argv& argv) {
  try {
    cmd::JobCommand job(argv);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const std::string kFlags = "--vocab-size 64 --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 8 "
                           "--max-position-embeddings 8 --micro-batch-size 1 --global-batch-size 4";

Argv with_flags(Argv argv, const std::vector<std::string>& more = {}) {
  for (size_t at = 0; at < kFlags.size();) {
    size_t space = kFlags.find(' ', at);
    if (space == std::string::npos) space = kFlags.size();
    argv.push_back(kFlags.substr(at, space - at));
    at = space + 1;
  }
  argv.insert(argv.end(), more.begin(), more.end());
  return argv;
}

TEST(ShellWords, SplitsAsTheShellDoes) {
  const auto t = cmd::split_shell_words("cd 'a b' && X=1 exec prog \"q\\\"x\" c\\ d $HOME > log 2>&1; # note");
  std::vector<std::string> texts;
  for (const auto& k : t) texts.push_back(k.text);
  EXPECT_EQ(texts, (std::vector<std::string>{"cd", "a b", "&&", "X=1", "exec", "prog", "q\"x", "c d", "$HOME", ">",
                                             "log", "2>&", "1", ";"}));  // (2>&1: the operator 2>& and its target 1)
  EXPECT_TRUE(t[8].expands);
  EXPECT_FALSE(t[6].expands);
  EXPECT_EQ(t[9].kind, cmd::ShellToken::Redirect);
  EXPECT_THROW(cmd::split_shell_words("echo 'open"), UsageError);
  EXPECT_EQ(cmd::shell_quote("a b'c"), "'a b'\\''c'");
  EXPECT_EQ(cmd::shell_quote("/x/y.z"), "/x/y.z");
}

// A NUL byte (possible in a --config string, never in argv) is part of a word: it used to
// match strchr's terminator, become an operator of length 0, and loop for ever.
TEST(ShellWords, NulByteIsPartOfAWord) {
  const auto t = cmd::split_shell_words(std::string("a\0b c", 5));
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].text, std::string("a\0b", 3));
  EXPECT_EQ(t[1].text, "c");
}

TEST(JobCommand, WorldSizeFromTheLauncher) {
  EXPECT_EQ(cmd::JobCommand(with_flags({"mpirun", "-np", "4", "optimus-cc", "train"}, {"--save", "s"})).world_size(), 4);
  EXPECT_EQ(cmd::JobCommand(with_flags({"srun", "--ntasks=2", "optimus-cc", "train"}, {"--save", "s"})).world_size(), 2);
  EXPECT_EQ(cmd::JobCommand(with_flags({"optimus-cc", "train"}, {"--save", "s"})).world_size(), 1);
  EXPECT_EQ(cmd::JobCommand(with_flags({"mpirun", "optimus-cc", "train"}, {"--save", "s"})).world_size(), std::nullopt);
  // A layout the world does not divide, or a flag train refuses, before anything starts.
  EXPECT_NE(error_of(with_flags({"mpirun", "-np", "3", "optimus-cc", "train"},
                                {"--save", "s", "--pipeline-model-parallel-size", "2"}))
                .find("world size 3 is not divisible"),
            std::string::npos);
  EXPECT_NE(error_of(with_flags({"optimus-cc", "train"}, {"--save", "s", "--hidden-size", "30"})).find("--hidden-size 30"),
            std::string::npos);
  // Unknown world (no -np): what does not depend on it is still checked, nothing valid refused.
  EXPECT_EQ(error_of(with_flags({"mpirun", "optimus-cc", "train"}, {"--save", "s", "--pipeline-model-parallel-size", "2"})),
            "");
}

TEST(JobCommand, PathsResolvedAsTheRanksResolveThem) {
  const cmd::JobCommand job(with_flags({"mpirun", "-np", "1", "-wdir", "/runs/x", "optimus-cc", "train"},
                                       {"--save", "ck", "--load", "../base"}));
  EXPECT_EQ(job.options().save, "/runs/x/ck");
  EXPECT_EQ(job.options().load, "/runs/base");
  EXPECT_EQ(job.resolve("/abs/p/"), "/abs/p");
  const cmd::JobCommand srun(with_flags({"srun", "-n", "1", "--chdir", "rel", "optimus-cc", "train"}, {"--save", "ck"}));
  EXPECT_EQ(srun.options().save, (fs::current_path() / "rel/ck").string());
}

TEST(JobCommand, InsideShC) {
  const std::string s = "cd /runs/y && OMP_NUM_THREADS=1 mpirun -np 2 optimus-cc train " + kFlags + " --save ck > log 2>&1";
  const cmd::JobCommand job({"bash", "-lc", s});
  EXPECT_EQ(job.options().save, "/runs/y/ck");
  EXPECT_EQ(job.world_size(), 2);
  cmd::JobCommand::Attempt a;
  a.heartbeat_dir = "/runs/y/ck/heart beat";
  const Argv argv = job.argv_for(a);
  ASSERT_EQ(argv.size(), 3u);
  EXPECT_EQ(argv[2], "cd /runs/y && OMP_NUM_THREADS=1 exec mpirun -np 2 optimus-cc train " + kFlags +
                         " --save ck --exit-signal-handler --heartbeat-dir '/runs/y/ck/heart beat' > log 2>&1");
  // A command that execs already is left as it is.
  const cmd::JobCommand execs({"sh", "-c", "A=1 exec optimus-cc train " + kFlags + " --save ck"});
  EXPECT_EQ(execs.argv_for(a)[2], "A=1 exec optimus-cc train " + kFlags +
                                      " --save ck --exit-signal-handler --heartbeat-dir '/runs/y/ck/heart beat'");
  // Forms the supervisor cannot drive or read: refused, naming what works.
  EXPECT_NE(error_of({"sh", "-c", "optimus-cc train " + kFlags + " --save ck | tee log"}).find("last command"),
            std::string::npos);
  EXPECT_NE(error_of({"sh", "-c", "optimus-cc train " + kFlags + " --save $CK"}).find("$CK"), std::string::npos);
  EXPECT_NE(error_of({"sh", "-c", "cd $D && optimus-cc train " + kFlags + " --save ck"}).find("absolute"),
            std::string::npos);
  EXPECT_NE(error_of({"sh", "-c", "./run.sh"}).find("none found"), std::string::npos);
}

}  // namespace
}  // namespace occ
