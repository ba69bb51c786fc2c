#include "train/checkpoint_verify.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"
#include "core/tensor_file.h"
#include "train/checkpoint_store.h"

namespace occ {

namespace fs = std::filesystem;

namespace {

// The problem with checkpoint `iteration`, thrown as occ::Error.
void check_checkpoint(const std::string& root, int64_t iteration) {
  const CheckpointStore store(root);
  const std::string dir = store.iteration_dir(iteration);
  // The saved layout, from the shard every layout has.
  const std::string first = shard_dir(dir, 0, 0) + "/" + kShardStateFile;
  const nlohmann::json config = TensorFileReader::open(first).meta().value("config", nlohmann::json::object());
  const int tp = config.value("tensor_model_parallel_size", 0), pp = config.value("pipeline_model_parallel_size", 0);
  OCC_CHECK(tp >= 1 && pp >= 1, "{} names no tensor / pipeline parallel size in its config; it is not a checkpoint of "
            "this version", first);
  for (int p = 0; p < pp; ++p)
    for (int t = 0; t < tp; ++t) {
      const std::string shard = shard_dir(dir, t, p) + "/" + kShardStateFile;
      OCC_CHECK(fs::is_regular_file(shard), "it is incomplete: {} is missing (saved with TP {} x PP {})", shard, tp, pp);
    }
  std::vector<std::string> files;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file()) files.push_back(it->path().string());
  OCC_CHECK(!ec, "cannot list {}: {}", dir, ec.message());
  std::sort(files.begin(), files.end());
  for (const std::string& f : files) TensorFileReader::open(f).verify();  // throws naming the file and the damage
}

}  // namespace

std::string verify_checkpoint(const std::string& root, int64_t iteration) {
  try {
    check_checkpoint(root, iteration);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

ResumeChoice choose_resume_checkpoint(const std::string& root) {
  ResumeChoice choice;
  const CheckpointStore store(root);
  try {
    choice.latest = store.latest();
  } catch (const Error& e) {
    choice.marker_problem = e.what();
  }
  std::vector<int64_t> its = store.iterations();
  if (!choice.latest && choice.marker_problem.empty()) return choice;  // nothing saved yet: start afresh
  if (choice.latest && std::find(its.begin(), its.end(), *choice.latest) == its.end())
    its.push_back(*choice.latest);  // the marker's, missing (a rename-aside .old, or deleted): said by verify
  std::sort(its.rbegin(), its.rend());
  for (int64_t it : its) {
    if (choice.latest && it > *choice.latest) continue;
    std::string problem = verify_checkpoint(root, it);
    if (problem.empty()) {
      choice.iteration = it;
      return choice;
    }
    choice.refused.emplace_back(it, std::move(problem));
  }
  return choice;
}

}  // namespace occ
