#include "train/checkpoint_verify.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"
#include "core/tensor_file.h"
#include "train/checkpoint.h"
#include "train/checkpoint_store.h"

namespace occ {

namespace fs = std::filesystem;

std::string checkpoint_problem(const std::string& root, int64_t iteration) {
  try {
    const SavedCheckpoint saved = verify_checkpoint(root, iteration);  // the headers: one whole save
    std::vector<std::string> files;
    std::error_code ec;
    for (fs::recursive_directory_iterator it(saved.dir, ec), end; !ec && it != end; it.increment(ec))
      if (it->is_regular_file()) files.push_back(it->path().string());
    OCC_CHECK(!ec, "cannot list {}: {}", saved.dir, ec.message());
    std::sort(files.begin(), files.end());
    for (const std::string& f : files) TensorFileReader::open(f).verify();  // throws naming the file and the damage
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
    std::string problem = checkpoint_problem(root, it);
    if (problem.empty()) {
      choice.iteration = it;
      return choice;
    }
    choice.refused.emplace_back(it, std::move(problem));
  }
  return choice;
}

}  // namespace occ
