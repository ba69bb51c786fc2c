// What `optimus-cc launch` resumes from (train/checkpoint_verify.h), the
// checkpoint writer of --async-save (train/checkpoint_writer.h), and the
// command line it runs (apps/commands/job_command.h).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "apps/commands/job_command.h"
#include "core/error.h"
#include "core/tensor_file.h"
#include "temp_dir.h"
#include "train/checkpoint.h"
#include "train/checkpoint_store.h"
#include "train/checkpoint_verify.h"
#include "train/checkpoint_writer.h"

namespace occ {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void flip_byte(const std::string& path, long from_end) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-from_end, std::ios::end);
  char c = 0;
  f.read(&c, 1);
  f.seekp(-from_end, std::ios::end);
  c = char(c ^ 0x5a);
  f.write(&c, 1);
}

// A committed checkpoint as a TP 1 x PP 2 job writes it: a shard per stage
// whose config names the layout, and one compressor state file per stage, all
// stamped with the save's identifier.
void save(const CheckpointStore& store, int64_t iteration) {
  const std::string staging = store.begin(iteration);
  for (int pp = 0; pp < 2; ++pp) {
    TensorFileWriter shard(nlohmann::json{
        {"format", "optimus-cc checkpoint"}, {"iteration", iteration}, {"tp_rank", 0}, {"pp_rank", pp},
        {"config", {{"tensor_model_parallel_size", 1}, {"pipeline_model_parallel_size", 2}}}});
    shard.add("param/w", std::vector<float>(1000, float(iteration + pp)));
    TensorFileWriter state(nlohmann::json{{"iteration", iteration}});
    state.add("cb/p", std::vector<float>(100, 1.0f));
    CheckpointFiles files;
    files.add(kShardStateFile, std::move(shard));
    files.add("compress_dp_000.bin", std::move(state));
    ParallelLayout layout;
    layout.pp_rank = pp;
    files.write(staging, layout, "0123456789abcdef");
  }
  store.commit(iteration);
}

std::string shard(const std::string& root, int64_t iteration, int pp, const char* file = kShardStateFile) {
  return shard_dir(CheckpointStore(root).iteration_dir(iteration), 0, pp) + "/" + file;
}

TEST(CheckpointVerify, FindsDamageAndGaps) {
  TempDir dir;
  const CheckpointStore store(dir.str());
  save(store, 10);
  EXPECT_EQ(checkpoint_problem(dir.str(), 10), "");

  flip_byte(shard(dir.str(), 10, 1, "compress_dp_000.bin"), 40);  // a compressor state's data
  EXPECT_NE(checkpoint_problem(dir.str(), 10).find("compress_dp_000.bin is corrupted"), std::string::npos)
      << checkpoint_problem(dir.str(), 10);

  save(store, 20);
  fs::resize_file(shard(dir.str(), 20, 0), fs::file_size(shard(dir.str(), 20, 0)) - 10);  // cut short
  EXPECT_NE(checkpoint_problem(dir.str(), 20).find(kShardStateFile), std::string::npos);

  save(store, 30);
  fs::remove(shard(dir.str(), 30, 1));  // a stage's shard is missing
  EXPECT_NE(checkpoint_problem(dir.str(), 30).find("incomplete"), std::string::npos) << checkpoint_problem(dir.str(), 30);
  EXPECT_NE(checkpoint_problem(dir.str(), 40).find("does not exist"), std::string::npos);
}

TEST(CheckpointVerify, ResumesFromTheNewestThatVerifies) {
  TempDir dir;
  const std::string root = dir.str();
  const CheckpointStore store(root);
  EXPECT_FALSE(choose_resume_checkpoint(root).iteration);  // nothing saved: start afresh
  EXPECT_FALSE(choose_resume_checkpoint(root).latest);

  for (int64_t it : {100, 200, 300}) save(store, it);
  ResumeChoice c = choose_resume_checkpoint(root);
  EXPECT_EQ(c.iteration, 300);
  EXPECT_EQ(c.latest, 300);
  EXPECT_TRUE(c.refused.empty());

  flip_byte(shard(root, 300, 0), 100);
  c = choose_resume_checkpoint(root);
  EXPECT_EQ(c.iteration, 200);
  ASSERT_EQ(c.refused.size(), 1u);
  EXPECT_EQ(c.refused[0].first, 300);
  EXPECT_NE(c.refused[0].second.find("checksum mismatch"), std::string::npos) << c.refused[0].second;

  // A save beyond the marker (not finished, or of an abandoned timeline) is never chosen.
  save(store, 400);
  std::ofstream(root + "/latest_checkpointed_iteration.txt") << "200\n";
  EXPECT_EQ(choose_resume_checkpoint(root).iteration, 200);

  std::ofstream(root + "/latest_checkpointed_iteration.txt") << "garbage";
  c = choose_resume_checkpoint(root);
  EXPECT_NE(c.marker_problem.find("not an iteration number"), std::string::npos);
  EXPECT_EQ(c.iteration, 400);  // the newest of all that verifies

  std::ofstream(root + "/latest_checkpointed_iteration.txt") << "300\n";
  for (int64_t it : {100, 200}) fs::remove_all(CheckpointStore(root).iteration_dir(it));
  c = choose_resume_checkpoint(root);
  EXPECT_FALSE(c.iteration);  // 300 is damaged and there is nothing older
  EXPECT_EQ(c.latest, 300);
}

TEST(CheckpointWriter, BackgroundWritesTheSameBytes) {
  TempDir dir;
  auto files = [&] {
    CheckpointFiles out;
    for (int i = 0; i < 3; ++i) {
      std::vector<float> values(5000);
      for (size_t j = 0; j < values.size(); ++j) values[j] = float(i * 7 + int(j)) * 0.5f;
      TensorFileWriter w(nlohmann::json{{"i", i}});
      w.add("x", values);
      values.assign(values.size(), -1.0f);  // the writer holds its own copy from add() on
      out.add("f" + std::to_string(i), std::move(w));
    }
    return out;
  };
  ParallelLayout layout;
  layout.pp_rank = 1;
  fs::create_directories(dir / "inline");
  fs::create_directories(dir / "background");
  CheckpointWriter inline_writer(false, 0);
  inline_writer.start(7, files(), dir / "inline", layout, "00000000000000ab");
  EXPECT_TRUE(inline_writer.written());
  EXPECT_EQ(inline_writer.wait(), "");

  CheckpointWriter background(true, 0.3);  // (a pause, so the test sees it in flight)
  background.start(7, files(), dir / "background", layout, "00000000000000ab");
  EXPECT_TRUE(background.pending());
  EXPECT_FALSE(background.written());
  const std::string first = shard_dir(dir / "background", 0, 1) + "/f0";
  EXPECT_FALSE(fs::exists(first));
  EXPECT_EQ(background.wait(), "");
  EXPECT_TRUE(background.written());
  EXPECT_GE(background.write_seconds(), 0.3);
  EXPECT_EQ(background.iteration(), 7);
  for (int i = 0; i < 3; ++i) {
    const std::string name = "/f" + std::to_string(i);
    const std::string a = shard_dir(dir / "inline", 0, 1) + name, b = shard_dir(dir / "background", 0, 1) + name;
    EXPECT_EQ(slurp(a), slurp(b));
    const TensorFileReader r = TensorFileReader::open(b);
    EXPECT_EQ(r.read_vector<float>("x")[1], float(i * 7 + 1) * 0.5f);
    EXPECT_EQ(r.meta().value(kSaveIdKey, ""), "00000000000000ab");
  }
  EXPECT_THROW(background.start(8, CheckpointFiles(), dir.str(), layout, "x"), Error);  // one save at a time
  background.clear();
  EXPECT_FALSE(background.pending());

  // A failed write is the save's error; one this rank met while preparing the save too.
  CheckpointFiles bad;
  bad.add("f", TensorFileWriter());
  background.start(9, std::move(bad), dir / "missing-dir", layout, "x");
  EXPECT_NE(background.wait().find("missing-dir"), std::string::npos) << background.wait();
  background.clear();
  background.start(10, CheckpointFiles(), dir.str(), layout, "x", "cannot gather the moments");
  EXPECT_TRUE(background.written());
  EXPECT_EQ(background.wait(), "cannot gather the moments");
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(JobCommand, AppendsWhereToResume) {
  const std::vector<std::string> argv{"mpirun", "-np",       "4",    "/opt/bin/optimus-cc", "train", "--vocab-size",
                                      "64",     "--save",    "ck",   "--save-interval",     "5",     "--finetune-x"};
  // (an unknown flag is refused as train would refuse it)
  EXPECT_NE(error_of([&] { cmd::JobCommand{argv}; }).find("launch: the train command: "), std::string::npos);
  std::vector<std::string> good(argv.begin(), argv.end() - 1);
  good.insert(good.end(), {":", "-np", "1", "other-program"});
  const cmd::JobCommand job(good);
  EXPECT_EQ(job.options().save, (std::filesystem::current_path() / "ck").string());  // as the ranks resolve it
  EXPECT_EQ(job.options().save_interval, 5);

  cmd::JobCommand::Attempt fresh;
  fresh.heartbeat_dir = "ck/heartbeat";
  std::vector<std::string> want(good.begin(), good.begin() + 11);
  want.insert(want.end(), {"--exit-signal-handler", "--heartbeat-dir", "ck/heartbeat", ":", "-np", "1", "other-program"});
  EXPECT_EQ(job.argv_for(fresh), want);

  cmd::JobCommand::Attempt resume = fresh;
  resume.load = "ck";
  resume.ckpt_step = 15;
  resume.resumes = true;
  want.assign(good.begin(), good.begin() + 11);
  want.insert(want.end(), {"--load", "ck", "--ckpt-step", "15", "--exit-signal-handler", "--heartbeat-dir",
                           "ck/heartbeat", ":", "-np", "1", "other-program"});
  EXPECT_EQ(job.argv_for(resume), want);

  // Resumed from its own checkpoint, a fine-tuning job is not fine-tuned again from it.
  const cmd::JobCommand finetune({"optimus-cc", "train", "--vocab-size", "64", "--save", "ck", "--load", "hf",
                                  "--finetune", "--no-load-optim"});
  EXPECT_TRUE(finetune.options().finetune);
  const std::vector<std::string> resumed = finetune.argv_for(resume);
  // The user's --load hf (where the run began) gives way to the run's own checkpoint.
  EXPECT_EQ(std::vector<std::string>(resumed.begin() + 6, resumed.begin() + 14),
            (std::vector<std::string>{"--finetune", "--no-load-optim", "--load", "ck", "--ckpt-step", "15",
                                      "--finetune=false", "--no-load-optim=false"}));
  EXPECT_EQ(finetune.argv_for(fresh).size(), 13u);  // the first attempt starts from --load hf as given

  EXPECT_NE(error_of([] { cmd::JobCommand({"mpirun", "-np", "2", "python3", "train.py"}); }).find("optimus-cc train"),
            std::string::npos);
  EXPECT_NE(error_of([] { cmd::JobCommand({"optimus-cc", "train", "--vocab-size", "64"}); }).find("--save"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              cmd::JobCommand({"optimus-cc", "train", "--save", "a", ":", "optimus-cc", "train", "--save", "b"});
            }).find("twice"),
            std::string::npos);
}

}  // namespace
}  // namespace occ
