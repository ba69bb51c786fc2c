#include "train/checkpoint_store.h"

#include <gtest/gtest.h>

#include "temp_dir.h"
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor_file.h"
#include "train/checkpoint.h"

namespace occ {
namespace {

namespace fs = std::filesystem;

using TempDir = occ::test::TempDir;

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// What the ranks of a 2 (TP) x 2 (PP) job would write: one file per shard
// holding `value`, so a test can tell which save it is reading.
void write_shards(const std::string& staging, float value) {
  for (int tp = 0; tp < 2; ++tp) {
    for (int pp = 0; pp < 2; ++pp) {
      TensorFileWriter w(nlohmann::json{{"tp", tp}, {"pp", pp}});
      w.add("params", std::vector<float>{value, value + tp, value + pp});
      w.write(make_shard_dir(staging, tp, pp) + "/model_optim_rng.occt");
    }
  }
}

float read_value(const std::string& iter_dir, int tp = 1, int pp = 1) {
  const auto r = TensorFileReader::open(shard_dir(iter_dir, tp, pp) + "/model_optim_rng.occt");
  return r.read_vector<float>("params")[0];
}

void save(const CheckpointStore& store, int64_t iteration, float value) {
  write_shards(store.begin(iteration), value);
  store.commit(iteration);
}

TEST(CheckpointStore, LayoutAndMarker) {
  TempDir dir;
  const std::string root = dir.str() + "/ckpt";  // created on the first begin()
  CheckpointStore store(root);
  EXPECT_EQ(store.latest(), std::nullopt);
  EXPECT_TRUE(store.iterations().empty());
  EXPECT_EQ(shard_dir("/x/iter_0000100", 1, 2), "/x/iter_0000100/mp_rank_01_002");
  EXPECT_EQ(shard_dir("/x/iter_0000100", 12, 345), "/x/iter_0000100/mp_rank_12_345");

  const std::string staging = store.begin(100);
  EXPECT_EQ(staging, root + "/iter_0000100.tmp");
  write_shards(staging, 1.0f);
  store.commit(100);
  EXPECT_EQ(store.latest(), 100);
  EXPECT_EQ(store.iteration_dir(100), root + "/iter_0000100");
  EXPECT_TRUE(fs::is_regular_file(root + "/iter_0000100/mp_rank_00_001/model_optim_rng.occt"));
  EXPECT_EQ(slurp(root + "/latest_checkpointed_iteration.txt"), "100\n");
  EXPECT_FALSE(fs::exists(root + "/iter_0000100.tmp"));
  EXPECT_FALSE(fs::exists(root + "/latest_checkpointed_iteration.txt.tmp"));
  EXPECT_EQ(read_value(store.iteration_dir(100)), 1.0f);
  EXPECT_EQ(store.iterations(), std::vector<int64_t>{100});
}

TEST(CheckpointStore, MarkerMovesOnlyAtCommit) {
  TempDir dir;
  CheckpointStore store(dir.str());
  save(store, 100, 1.0f);
  const std::string staging = store.begin(200);
  write_shards(staging, 2.0f);
  EXPECT_EQ(store.latest(), 100);  // all files written, not yet committed
  EXPECT_EQ(store.iterations(), std::vector<int64_t>{100});
  store.commit(200);
  EXPECT_EQ(store.latest(), 200);
  EXPECT_EQ(read_value(store.iteration_dir(200)), 2.0f);
}

TEST(CheckpointStore, UncommittedStagingIsIgnoredAfterACrash) {
  TempDir dir;
  save(CheckpointStore(dir.str()), 100, 1.0f);
  write_shards(CheckpointStore(dir.str()).begin(200), 2.0f);  // "crash" before commit

  const CheckpointStore restarted(dir.str());
  EXPECT_EQ(restarted.latest(), 100);
  EXPECT_EQ(read_value(restarted.iteration_dir(100)), 1.0f);
  EXPECT_EQ(restarted.iterations(), std::vector<int64_t>{100});
  const std::string msg = error_of([&] { restarted.iteration_dir(200); });
  EXPECT_NE(msg.find("checkpoint " + dir.str() + "/iter_0000200 does not exist"), std::string::npos) << msg;
  EXPECT_NE(msg.find("saved: 100"), std::string::npos) << msg;

  // The next save of that iteration starts from an empty staging dir.
  const std::string staging = restarted.begin(200);
  EXPECT_TRUE(fs::is_empty(staging));
  write_shards(staging, 3.0f);
  restarted.commit(200);
  EXPECT_EQ(read_value(restarted.iteration_dir(200)), 3.0f);
}

TEST(CheckpointStore, ResavingTheSameIterationReplacesIt) {
  TempDir dir;
  CheckpointStore store(dir.str());
  save(store, 100, 1.0f);
  fs::create_directories(dir.str() + "/iter_0000100/mp_rank_07_007");  // only in the old save
  save(store, 100, 5.0f);
  EXPECT_EQ(store.latest(), 100);
  EXPECT_EQ(read_value(store.iteration_dir(100)), 5.0f);
  EXPECT_FALSE(fs::exists(dir.str() + "/iter_0000100/mp_rank_07_007"));
  for (const auto& e : fs::directory_iterator(dir.str())) {
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(name == "iter_0000100" || name == "latest_checkpointed_iteration.txt") << name;
  }
}

TEST(CheckpointStore, CrashMidResaveStillFindsTheOldCopy) {
  TempDir dir;
  CheckpointStore store(dir.str());
  save(store, 100, 1.0f);
  // The state a rename-aside re-save leaves if it dies between its renames.
  fs::rename(dir.str() + "/iter_0000100", dir.str() + "/iter_0000100.old");
  EXPECT_EQ(read_value(store.iteration_dir(100)), 1.0f);
  save(store, 100, 2.0f);
  EXPECT_EQ(store.iteration_dir(100), dir.str() + "/iter_0000100");
  EXPECT_EQ(read_value(store.iteration_dir(100)), 2.0f);
  EXPECT_FALSE(fs::exists(dir.str() + "/iter_0000100.old"));
}

TEST(CheckpointStore, GarbageMarkerIsAClearError) {
  TempDir dir;
  CheckpointStore store(dir.str());
  save(store, 100, 1.0f);
  for (const std::string bad : {"", "abc", "-5", "100x", "1e3"}) {
    std::ofstream(dir.str() + "/latest_checkpointed_iteration.txt") << bad;
    const std::string msg = error_of([&] { store.latest(); });
    EXPECT_NE(msg.find("latest_checkpointed_iteration.txt holds '" + bad + "', not an iteration number"),
              std::string::npos) << msg;
  }
  std::ofstream(dir.str() + "/latest_checkpointed_iteration.txt") << "  100 \n";
  EXPECT_EQ(store.latest(), 100);
}

TEST(CheckpointStore, KeepLastNeverDeletesTheLatest) {
  TempDir dir;
  CheckpointStore store(dir.str());
  for (int64_t it : {100, 200, 300, 400, 500}) save(store, it, static_cast<float>(it));
  store.keep_last(2);
  EXPECT_EQ(store.iterations(), (std::vector<int64_t>{400, 500}));
  EXPECT_EQ(read_value(store.iteration_dir(500)), 500.0f);

  // Resumed from 100 and re-saved it: 100 is now the latest, though oldest. The
  // saves beyond it belong to the abandoned run, which nothing resumes again: they go.
  save(store, 100, 7.0f);
  store.keep_last(3);
  EXPECT_EQ(store.iterations(), (std::vector<int64_t>{100}));
  EXPECT_EQ(store.latest(), 100);
  EXPECT_EQ(read_value(store.iteration_dir(100)), 7.0f);
  save(store, 200, 8.0f);
  store.keep_last(1);
  EXPECT_EQ(store.iterations(), (std::vector<int64_t>{200}));
  save(store, 300, 9.0f);
  store.keep_last(5);  // fewer than 5 saved: nothing to do
  EXPECT_EQ(store.iterations().size(), 2u);
  EXPECT_NE(error_of([&] { store.keep_last(0); }).find("positive"), std::string::npos);
  for (const auto& e : fs::directory_iterator(dir.str()))
    EXPECT_EQ(e.path().filename().string().find(".del"), std::string::npos);
}

// Megatron's resume pattern: --load naming the --save directory (however spelt) with no
// checkpoint in it trains from scratch; any other --load without one is refused.
TEST(CheckpointStore, ResumeChoiceAllowsOnlyTheResumePattern) {
  TempDir dir;
  const std::string run = dir.str() + "/run", other = dir.str() + "/other";
  EXPECT_FALSE(checkpoint_to_resume(run, -1, run));                      // not created yet
  fs::create_directories(run);
  fs::create_directories(other);
  EXPECT_FALSE(checkpoint_to_resume(run + "/", -1, dir.str() + "/./run"));  // another spelling
  fs::create_directory_symlink(run, dir.str() + "/link");
  EXPECT_FALSE(checkpoint_to_resume(dir.str() + "/link", -1, run));
  EXPECT_NE(error_of([&] { checkpoint_to_resume(other, -1, run); }).find("no checkpoint there"), std::string::npos);
  EXPECT_NE(error_of([&] { checkpoint_to_resume(other, -1, ""); }).find("no checkpoint there"), std::string::npos);
  EXPECT_NE(error_of([&] { checkpoint_to_resume(dir.str() + "/typo", -1, run); }).find("no such directory"),
            std::string::npos);
  EXPECT_EQ(checkpoint_to_resume(run, 7, run), 7);  // --ckpt-step: that one (verified, and refused, later)
  CheckpointStore store(run);
  save(store, 3, 1.0f);
  EXPECT_EQ(checkpoint_to_resume(run, -1, run), 3);
  EXPECT_EQ(checkpoint_to_resume(run, -1, ""), 3);
  fs::remove(run + "/latest_checkpointed_iteration.txt");  // saves but no marker: not a first start
  EXPECT_NE(error_of([&] { checkpoint_to_resume(run, -1, run); }).find("holds iterations 3 but no marker"),
            std::string::npos);
}

TEST(CheckpointStore, MisuseIsAClearError) {
  TempDir dir;
  CheckpointStore store(dir.str());
  EXPECT_NE(error_of([&] { store.commit(100); }).find("call begin(100) before commit"), std::string::npos);
  EXPECT_NE(error_of([&] { store.begin(-1); }).find("non-negative"), std::string::npos);
  EXPECT_NE(error_of([&] { make_shard_dir(dir.str() + "/nope", 0, 0); }).find("does not exist"), std::string::npos);
  EXPECT_NE(error_of([] { CheckpointStore(""); }).find("empty"), std::string::npos);
}

}  // namespace
}  // namespace occ
