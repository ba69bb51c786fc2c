#include "apps/commands/launch_front.h"

#include <algorithm>
#include <iterator>

#include <fmt/format.h>

#include "core/error.h"
#include "train/checkpoint_store.h"

namespace occ::cmd {

namespace fs = std::filesystem;

namespace {
// launch's flags that take a value.
constexpr const char* kLaunchValueFlags[] = {"--max-restarts", "--restart-backoff", "--hang-timeout", "--heartbeat-dir",
                                             "--config"};
}  // namespace

void refuse_words_before_split(int split, int argc, char** argv) {
  for (int i = 1; i < split; ++i) {
    const std::string w = argv[i];
    const std::string name = w.substr(0, w.find('='));
    const bool value_flag = std::any_of(std::begin(kLaunchValueFlags), std::end(kLaunchValueFlags),
                                        [&](const char* f) { return name == f; });
    if (value_flag) {
      if (w.find('=') == std::string::npos) ++i;  // its value (checked by the parser)
      continue;
    }
    if (w == "--help" || w == "-h") continue;
    if (w.rfind("-", 0) == 0)
      throw UsageError(fmt::format("launch: unknown option {}; the options are --max-restarts, --restart-backoff, "
                                   "--hang-timeout and --heartbeat-dir (the job's command goes after --)", w));
    std::string job;
    for (int j = i; j < argc && j < i + 3; ++j) job += std::string(" ") + argv[j];
    throw UsageError(fmt::format("launch: {} is not a launch option; put the job's command after --: optimus-cc "
                                 "launch [options] --{}{}",
                                 w, job, i + 3 < argc ? " ..." : ""));
  }
}

MadeDirectories::MadeDirectories(const std::string& heartbeat_dir, std::string save) : save_(std::move(save)) {
  std::error_code ec;
  for (const std::string& dir : {heartbeat_dir, save_})  // (the heartbeat directory first: it holds the files)
    for (fs::path p = dir; !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
      if (std::find(made_.begin(), made_.end(), p) == made_.end()) made_.push_back(p);
      if (p == p.parent_path()) break;
    }
}

MadeDirectories::~MadeDirectories() {
  try {
    if (made_.empty() || !CheckpointStore(save_).iterations().empty()) return;
  } catch (const std::exception&) {
    return;  // (unreadable: keep everything)
  }
  std::error_code ec;
  for (fs::directory_iterator it(made_.front(), ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename().string().rfind("rank_", 0) == 0) fs::remove(it->path(), ec);
  for (const auto& dir : made_) fs::remove(dir, ec);  // (only while empty: what the job left stays)
}

}  // namespace occ::cmd
