#include "train/tensorboard_log.h"

#include <chrono>
#include <cmath>
#include <map>

namespace occ {
namespace {

// Our timer phases that Megatron times under another name (its "<name>-time" tags).
const std::map<std::string, std::string> kMegatronTimers = {
    {"forward", "forward-compute"},  {"backward", "backward-compute"},
    {"optimizer", "optimizer"},      {"data", "batch-generator"},
    {"dp_allreduce", "all-grads-sync"}, {"emb_allreduce", "embedding-grads-all-reduce"}};

// Seconds since the epoch, as TensorBoard shows an event's time.
double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string hyphenated(std::string s) {
  for (char& c : s)
    if (c == '_') c = '-';
  return s;
}

}  // namespace

std::vector<std::pair<std::string, double>> tensorboard_scalars(const nlohmann::json& row,
                                                                const TensorBoardOptions& options) {
  std::vector<std::pair<std::string, double>> out;
  const int64_t iteration = row.at("iter").get<int64_t>();
  if (iteration % options.log_interval == 0) {
    out.emplace_back("lm loss", row.at("loss").get<double>());
    out.emplace_back("learning-rate", row.at("lr").get<double>());
    out.emplace_back("grad-norm", row.at("grad_norm").get<double>());
    if (row.contains("loss_scale")) out.emplace_back("loss-scale", row["loss_scale"].get<double>());
    out.emplace_back("tokens-per-sec", row.at("tokens_per_s").get<double>());
    if (row.contains("bytes"))
      for (const auto& [k, v] : row["bytes"].items()) out.emplace_back("bytes/" + k, v.get<double>());
    if (row.contains("bytes_saved"))
      for (const auto& [k, v] : row["bytes_saved"].items()) out.emplace_back("bytes-saved/" + k, v.get<double>());
    if (row.contains("lep_check"))
      for (const auto& [k, v] : row["lep_check"].items()) out.emplace_back("lep/" + k, v.get<double>());
    if (options.timers) {
      out.emplace_back("iteration-time", row.at("ms").get<double>() / 1e3);
      if (row.contains("timers"))
        for (const auto& [k, v] : row["timers"].items()) {
          if (k.rfind("peak_", 0) == 0 || k == "iteration") continue;  // memory, and iteration-time above
          auto it = kMegatronTimers.find(k);
          out.emplace_back((it != kMegatronTimers.end() ? it->second : hyphenated(k)) + "-time", v.get<double>() / 1e3);
        }
    }
  }
  if (row.contains("val_loss")) {
    const double v = row["val_loss"].get<double>();
    out.emplace_back("lm loss validation", v);
    if (options.validation_ppl) out.emplace_back("lm loss validation ppl", std::exp(v));
  }
  if (row.contains("test_loss")) {
    const double v = row["test_loss"].get<double>();
    out.emplace_back("lm loss test", v);
    if (options.validation_ppl) out.emplace_back("lm loss test ppl", std::exp(v));
  }
  return out;
}

TensorBoardLog::TensorBoardLog(TensorBoardOptions options) : options_(std::move(options)), writer_(options_.dir) {}

void TensorBoardLog::add_row(const nlohmann::json& row) {
  const int64_t step = row.at("iter").get<int64_t>();
  const double wall_time = wall_seconds();
  if (!started_) {
    writer_.restart_at(step, wall_time);
    started_ = true;
  }
  std::vector<std::pair<std::string, float>> values;
  for (const auto& [tag, v] : tensorboard_scalars(row, options_)) values.emplace_back(tag, float(v));
  writer_.add_scalars(step, wall_time, values);
}

}  // namespace occ
