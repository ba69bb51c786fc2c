#include "train/metrics.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>

#include "core/device.h"
#include "core/error.h"

namespace occ {

const std::vector<std::string> kReportedPhases = {"data",         "forward",       "backward",     "pp_wait",
                                                  "tp_allreduce", "tp_allgather",  "tp_reduce_scatter", "dp_allreduce", "dp_busy", "dp_allgather",
                                                  "emb_allreduce", "norm_allreduce", "optimizer", "compress",  "decompress",
                                                  "iteration",    "cpu",
                                                  "peak_rss_mib", "peak_tensor_mib", "peak_gpu_mib"};

const std::vector<std::string> kReportedCounts = {"cb_sends", "cb_compressed", "lep_samples", "lep_cosine",
                                                  "lep_error_mean", "lep_delta_mean", "lep_error_ratio",
                                                  "lep_delta_ratio"};

nlohmann::json gather_rank_metrics(Topology& topo, const PhaseTimers& timers) {
  const size_t P = kReportedPhases.size(), K = size_t(Traffic::kCount), C = kReportedCounts.size();
  std::vector<double> mine(4 + P + K + C + K);
  const ParallelLayout& l = topo.layout;
  mine[0] = topo.world_rank();
  mine[1] = l.tp_rank;
  mine[2] = l.pp_rank;
  mine[3] = l.dp_rank;
  for (size_t i = 0; i < P; ++i)
    mine[4 + i] = kReportedPhases[i] == "peak_rss_mib"      ? peak_rss_mib()
                  : kReportedPhases[i] == "peak_tensor_mib" ? peak_tensor_mib()
                  : kReportedPhases[i] == "peak_gpu_mib"    ? double(device_peak_bytes(Device::Cuda)) / (1 << 20)
                                                            : timers.ms(kReportedPhases[i]);
  for (size_t k = 0; k < K; ++k) mine[4 + P + k] = double(topo.counters[Traffic(k)]);
  for (size_t c = 0; c < C; ++c) mine[4 + P + K + c] = timers.count(kReportedCounts[c]);
  for (size_t k = 0; k < K; ++k) mine[4 + P + K + C + k] = double(topo.counters.saved(Traffic(k)));
  const int n = topo.world->size();
  std::vector<double> all(topo.world_rank() == 0 ? mine.size() * size_t(n) : 0);
  // Instrumentation, not training traffic: plain MPI, not counted.
  MPI_Gather(mine.data(), int(mine.size()), MPI_DOUBLE, all.data(), int(mine.size()), MPI_DOUBLE, 0,
             topo.world->handle());
  nlohmann::json ranks = nlohmann::json::array();
  for (int r = 0; r < (topo.world_rank() == 0 ? n : 0); ++r) {
    const double* v = all.data() + size_t(r) * mine.size();
    nlohmann::json t = nlohmann::json::object(), b = nlohmann::json::object();
    for (size_t i = 0; i < P; ++i) t[kReportedPhases[i]] = v[4 + i];
    for (size_t k = 0; k < K; ++k) b[traffic_name(Traffic(k))] = uint64_t(v[4 + P + k]);
    nlohmann::json rank = {{"rank", int(v[0])}, {"tp", int(v[1])}, {"pp", int(v[2])}, {"dp", int(v[3])},
                           {"timers", t}, {"bytes", b}};
    const double* counts = v + 4 + P + K;
    const double* saved = v + 4 + P + K + C;
    nlohmann::json sv = nlohmann::json::object();
    for (size_t k = 0; k < K; ++k)
      if (saved[k] != 0) sv[traffic_name(Traffic(k))] = int64_t(saved[k]);
    if (!sv.empty()) rank["bytes_saved"] = sv;
    if (counts[0] > 0) rank["cb"] = {{"sends", int(counts[0])}, {"compressed", int(counts[1])}};
    if (counts[2] > 0)  // means over the micro-batches checked this iteration
      rank["lep_check"] = {{"cosine", counts[3] / counts[2]},
                           {"error_mean", counts[4] / counts[2]},
                           {"delta_mean", counts[5] / counts[2]},
                           {"error_ratio", counts[6] / counts[2]},
                           {"delta_ratio", counts[7] / counts[2]}};
    ranks.push_back(rank);
  }
  return ranks;
}

void summarize_rank_metrics(const nlohmann::json& ranks, nlohmann::json& row) {
  nlohmann::json timers = nlohmann::json::object(), bytes = nlohmann::json::object(),
                 saved = nlohmann::json::object();
  std::map<int, std::pair<int, nlohmann::json>> stages;  // pp -> (count, sums)
  for (const auto& r : ranks) {
    for (auto& [k, v] : r["timers"].items()) timers[k] = std::max(timers.value(k, 0.0), v.get<double>());
    for (auto& [k, v] : r["bytes"].items()) bytes[k] = bytes.value(k, uint64_t(0)) + v.get<uint64_t>();
    if (r.contains("bytes_saved"))
      for (auto& [k, v] : r["bytes_saved"].items()) saved[k] = saved.value(k, int64_t(0)) + v.get<int64_t>();
    auto& st = stages[r["pp"].get<int>()];
    st.first += 1;
    if (st.second.is_null()) st.second = {{"timers", nlohmann::json::object()}, {"bytes", nlohmann::json::object()}};
    for (auto& [k, v] : r["timers"].items())
      st.second["timers"][k] = st.second["timers"].value(k, 0.0) + v.get<double>();
    for (auto& [k, v] : r["bytes"].items())
      st.second["bytes"][k] = st.second["bytes"].value(k, uint64_t(0)) + v.get<uint64_t>();
  }
  nlohmann::json per_stage = nlohmann::json::array();
  for (auto& [pp, st] : stages) {
    for (auto& [k, v] : st.second["timers"].items()) v = v.get<double>() / st.first;
    per_stage.push_back({{"stage", pp}, {"timers", st.second["timers"]}, {"bytes", st.second["bytes"]}});
  }
  for (const auto& r : ranks)
    if (r.contains("lep_check") && r["tp"] == 0 && r["dp"] == 0) row["lep_check"] = r["lep_check"];
  row["timers"] = timers;
  row["bytes"] = bytes;
  if (!saved.empty()) row["bytes_saved"] = saved;
  row["stages"] = per_stage;
  row["ranks"] = ranks;
}

nlohmann::json iteration_row(const IterationStats& s, int64_t consumed_samples) {
  nlohmann::json j = {{"iter", s.iteration},     {"loss", s.loss}, {"lr", s.lr},
                      {"grad_norm", s.grad_norm}, {"ms", s.ms},     {"tokens_per_s", s.tokens_per_s},
                      {"consumed_samples", consumed_samples}};
  if (s.val_loss) j["val_loss"] = *s.val_loss;
  if (s.test_loss) j["test_loss"] = *s.test_loss;
  if (s.loss_scale) {
    j["loss_scale"] = *s.loss_scale;
    j["skipped_iters"] = s.skipped_iters;
  }
  if (s.skipped_nonfinite > 0) j["skipped_nonfinite"] = s.skipped_nonfinite;
  return j;
}

std::string progress_line(const IterationStats& s, int64_t train_iters, double eta_seconds) {
  const int64_t eta = int64_t(eta_seconds + 0.5);
  return fmt::format(
      "iter {:>{}}/{} | loss {:.4f} | lr {:.3e} | grad norm {:.3f} | {:.0f} tok/s | {:.1f} ms/it | ETA {}:{:02}:{:02}",
      s.iteration, int(std::to_string(train_iters).size()), train_iters, s.loss, s.lr, s.grad_norm, s.tokens_per_s,
      s.ms, eta / 3600, (eta / 60) % 60, eta % 60) +
         (s.loss_scale ? fmt::format(" | loss scale {:g} | skipped {}", *s.loss_scale, s.skipped_iters) : "") +
         (s.skipped_nonfinite > 0 ? fmt::format(" | skipped non-finite {}", s.skipped_nonfinite) : "");
}

nlohmann::json wire_json(const WireFormats& wire, bool sharded) {
  const std::string act = precision_name(wire.activations), grads = precision_name(wire.gradients);
  const std::string tp = wire.activation_sums == wire.activations
                             ? act
                             : fmt::format("{}, sums {}", act, precision_name(wire.activation_sums));
  const std::string dp = sharded && wire.parameters != wire.gradients
                             ? fmt::format("{} gradients, {} parameters", grads, precision_name(wire.parameters))
                             : grads;
  return {{traffic_name(Traffic::PipelineForward), act}, {traffic_name(Traffic::PipelineBackward), act},
          {traffic_name(Traffic::TensorParallel), tp},   {traffic_name(Traffic::DataParallel), dp},
          {traffic_name(Traffic::Embedding), grads},     {traffic_name(Traffic::Other), "fp32"}};
}

void TrafficTotals::add(const nlohmann::json& row) {
  if (row.contains("wire")) wire_ = row.at("wire");
  for (auto& [k, v] : row.at("bytes").items()) sent_[k] = sent_.value(k, 0.0) + v.get<double>();
  if (row.contains("bytes_saved"))
    for (auto& [k, v] : row.at("bytes_saved").items()) saved_[k] = saved_.value(k, 0.0) + v.get<double>();
}

void TrafficTotals::print(int64_t iterations) const {
  std::printf("traffic over %lld iterations (all ranks):", (long long)iterations);
  double sent = 0, saved = 0;
  for (auto& [k, v] : sent_.items()) {
    if (v.get<double>() == 0) continue;
    const double sv = saved_.value(k, 0.0);
    std::printf(" %s %.1f MB", k.c_str(), v.get<double>() / 1e6);
    if (wire_.contains(k)) std::printf(" %s", wire_.at(k).get<std::string>().c_str());
    if (sv != 0) std::printf(" (%.1f MB without compression)", (v.get<double>() + sv) / 1e6);
    std::printf(",");
    sent += v.get<double>();
    saved += sv;
  }
  std::printf(" total %.1f MB", sent / 1e6);
  if (saved != 0) std::printf("; compression kept %.1f MB (%.0f%%) off the wire", saved / 1e6, 100.0 * saved / (sent + saved));
  std::printf("\n");
}

void write_chrome_trace(Topology& topo, const std::vector<TraceEvent>& events, const std::string& path) {
  // Times are made relative to the earliest event of the whole job.
  double t0 = events.empty() ? 1e300 : events.front().start;
  for (const auto& e : events) t0 = std::min(t0, e.start);
  MPI_Allreduce(MPI_IN_PLACE, &t0, 1, MPI_DOUBLE, MPI_MIN, topo.world->handle());
  const int rank = topo.world_rank();
  nlohmann::json mine = nlohmann::json::array();
  for (const auto& e : events)
    mine.push_back({{"name", e.name}, {"ph", "X"}, {"pid", rank}, {"tid", e.thread},
                    {"ts", (e.start - t0) * 1e6}, {"dur", (e.end - e.start) * 1e6}});
  const std::string text = mine.dump();
  int len = int(text.size());
  const int n = topo.world->size();
  std::vector<int> lens(static_cast<size_t>(n)), displs(static_cast<size_t>(n));
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, topo.world->handle());
  std::string all;
  if (rank == 0) {
    int total = 0;
    for (int r = 0; r < n; ++r) {
      displs[size_t(r)] = total;
      total += lens[size_t(r)];
    }
    all.resize(size_t(total));
  }
  MPI_Gatherv(text.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0, topo.world->handle());
  if (rank != 0) return;
  nlohmann::json out = {{"traceEvents", nlohmann::json::array()}, {"displayTimeUnit", "ms"}};
  auto& ev = out["traceEvents"];
  const ParallelLayout& l = topo.layout;
  for (int r = 0; r < n; ++r) {
    const int tp = r % l.tp_size, dp = (r / l.tp_size) % l.dp_size, pp = r / (l.tp_size * l.dp_size);
    ev.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", r},
                  {"args", {{"name", fmt::format("rank {} (stage {}, tp {}, dp {})", r, pp, tp, dp)}}}});
    ev.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", r}, {"args", {{"sort_index", r}}}});
    ev.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", r}, {"tid", 0}, {"args", {{"name", "compute + pipeline"}}}});
    ev.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", r}, {"tid", 1}, {"args", {{"name", "dp reducer"}}}});
    ev.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", r}, {"tid", 2},
                  {"args", {{"name", "dp parameter all-gather (--overlap-param-gather)"}}}});
    for (auto& e : nlohmann::json::parse(all.substr(size_t(displs[size_t(r)]), size_t(lens[size_t(r)]))))
      ev.push_back(std::move(e));
  }
  std::ofstream f(path + ".tmp");
  OCC_CHECK(f.good(), "cannot write --trace file {}; check the path", path);
  f << out.dump();
  f.close();
  std::rename((path + ".tmp").c_str(), path.c_str());
}

double peak_tensor_mib() {
  return double(device_peak_bytes(Device::Cpu) + device_peak_bytes(Device::Cuda)) / (1 << 20);
}

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / 1024.0;
}

}  // namespace occ
