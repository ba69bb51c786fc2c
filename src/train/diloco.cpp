#include "train/diloco.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"
#include "core/rng.h"
#include "core/tensor_file.h"

namespace occ {

int diloco_fragment_of(const std::string& name, int num_layers, int fragments) {
  const std::string layers = "layers.";
  if (name.rfind(layers, 0) == 0) return std::stoi(name.substr(layers.size())) % fragments;
  // The final norm and an untied output layer sit after the last layer: its fragment.
  if (name.rfind("final_layernorm.", 0) == 0 || name.rfind("output_layer.", 0) == 0) return (num_layers - 1) % fragments;
  // The embeddings sit before layer 0; the LM head's copy of the tied word
  // embedding goes with the word embedding, so the two copies stay identical.
  if (name.rfind("embedding.", 0) == 0 || name.rfind("lm_head.", 0) == 0) return 0;
  fail("internal: DiLoCo has no fragment for parameter {}", name);
}

void diloco_outer_step(float* outer, float* momentum, const float* mean, const float* delta, int64_t n, float lr,
                       float momentum_coef) {
  const double a = 1.0 - double(lr), b = double(lr) * double(momentum_coef), mu = momentum_coef;
  for (int64_t i = 0; i < n; ++i) {
    const double v = mu * double(momentum[i]) + double(delta[i]);
    momentum[i] = float(v);
    // theta - lr (Delta + mu v) = mean + (1 - lr) Delta - lr mu v, with mean = theta - Delta.
    const double correction = a * double(delta[i]) - b * double(momentum[i]);
    outer[i] = correction == 0.0 ? mean[i] : float(double(mean[i]) + correction);
  }
}

std::string Diloco::file_name(int dp_rank) { return fmt::format("diloco_dp_{:03d}.bin", dp_rank); }

Diloco::Diloco(const DilocoConfig& cfg, const ParamLayout& layout, int num_layers, const DeviceBuffer<float>& params,
               const MpiCommunicator& dp, double comm_timeout_s, const ParallelLayout& where, std::string dump_dir)
    : cfg_(cfg), schedule_(cfg), dp_size_(dp.size()), dp_rank_(dp.rank()), dump_dir_(std::move(dump_dir)) {
  dump_tag_ = fmt::format("pp{}_tp{}_dp{}", where.pp_rank, where.tp_rank, where.dp_rank);
  fragments_.resize(size_t(cfg_.fragments));
  for (const ParamTensor& t : layout.tensors()) {
    Span s{t.name, t.shape, t.offset, t.numel, t.shape[0], t.numel / t.shape[0], t.word_embedding};
    if (t.shape.size() == 1) s.rows = 1, s.cols = t.numel;  // a vector is one row
    fragments_[size_t(diloco_fragment_of(t.name, num_layers, cfg_.fragments))].spans.push_back(s);
  }
  int64_t largest = 0;
  for (Fragment& fr : fragments_) {
    std::stable_partition(fr.spans.begin(), fr.spans.end(), [](const Span& s) { return s.word_embedding; });
    for (const Span& s : fr.spans) {
      fr.numel += s.numel;
      if (s.word_embedding) fr.tied_numel += s.numel;
      largest = std::max(largest, s.numel);
    }
    if (cfg_.outer_comp) {
      for (const Span& s : fr.spans) {
        // Stateless byte methods on the host: seed and key are not used.
        std::unique_ptr<MatrixCompressor> codec = make_compressor(cfg_.outer_spec(), s.rows, s.cols, 0, 0);
        if (cfg_.outer_error_feedback) {
          auto ef = std::make_unique<ErrorFeedback>(std::move(codec), kernels::cpu_ops(), 1.0f, &feedback_scratch_);
          fr.feedback.push_back(ef.get());
          codec = std::move(ef);
        }
        fr.codecs.push_back(std::move(codec));
        fr.wire_offset.push_back(fr.wire_total);
        fr.wire_total += fr.codecs.back()->wire_floats();
      }
      fr.send.resize(size_t(fr.wire_total));
      fr.gathered.resize(size_t(fr.wire_total) * size_t(dp_size_));
    } else {
      fr.send.resize(size_t(fr.numel));
    }
  }
  scratch_.resize(size_t(largest));
  restart_from(params);
  exchange_ = std::make_unique<BackgroundCollectives>(dp, comm_timeout_s, "diloco-outer");
}

Diloco::~Diloco() = default;  // the exchange finishes the collectives queued (every rank queued the same)

void Diloco::restart_from(const DeviceBuffer<float>& params) {
  outer_ = params.to_host();
  momentum_.assign(outer_.size(), 0.0f);
  for (Fragment& fr : fragments_) {
    fr.state = State::Idle, fr.started_at = -1, fr.bytes = 0;
    for (ErrorFeedback* ef : fr.feedback) {
      DeviceBuffer<float>& e = ef->residual();
      std::fill(e.data(), e.data() + e.size(), 0.0f);
    }
  }
}

void Diloco::after_inner_step(int64_t t, DeviceBuffer<float>& params, PhaseTimers& timers, TrafficCounters& counters) {
  for (size_t f = 0; f < fragments_.size(); ++f)
    if (fragments_[f].state != State::Idle && fragments_[f].started_at + cfg_.overlap_steps == t)
      land(int(f), params, timers, counters);
  for (int f = 0; f < int(fragments_.size()); ++f) {
    if (!schedule_.starts_after(t, f)) continue;
    OCC_CHECK(fragments_[size_t(f)].state == State::Idle, "internal: DiLoCo fragment {} syncs again before landing", f);
    start(f, t, params, timers);
    if (cfg_.overlap_steps == 0) land(f, params, timers, counters);
  }
}

void Diloco::start(int f, int64_t t, const DeviceBuffer<float>& params, PhaseTimers& timers) {
  Fragment& fr = fragments_[size_t(f)];
  fr.started_at = t;
  fr.bytes = 0;
  const bool dumping = !dump_dir_.empty();
  if (dumping) fr.sent_locals.resize(size_t(fr.numel));
  const bool ef = cfg_.outer_error_feedback;
  if (dumping && ef) fr.sent_residuals.resize(size_t(fr.numel));
  if (!cfg_.outer_comp) {
    // The replicas' parameters are summed: the mean comes out exactly (D = 1: the parameters themselves).
    ScopedPhase scope(timers, "optimizer", fmt::format("diloco pack fragment {}", f));
    int64_t at = 0;
    for (const Span& s : fr.spans) {
      params.copy_to_host(fr.send.data() + at, size_t(s.numel), size_t(s.offset));
      at += s.numel;
    }
    if (dumping) fr.sent_locals = fr.send;
    // The tied word embedding's copy alone first: both stages' rings then add it in one order.
    if (fr.tied_numel > 0) fr.tickets.push_back(exchange_->allreduce_sum(fr.send.data(), size_t(fr.tied_numel)));
    if (fr.numel > fr.tied_numel)
      fr.tickets.push_back(exchange_->allreduce_sum(fr.send.data() + fr.tied_numel, size_t(fr.numel - fr.tied_numel)));
  } else {
    // Each replica's own Delta_i = theta - local_i, encoded.
    ScopedPhase scope(timers, "compress", fmt::format("diloco encode fragment {}", f));
    int64_t at = 0;
    for (size_t i = 0; i < fr.spans.size(); ++i) {
      const Span& s = fr.spans[i];
      float* x = scratch_.data();
      params.copy_to_host(x, size_t(s.numel), size_t(s.offset));
      if (dumping) std::copy(x, x + s.numel, fr.sent_locals.begin() + at);
      const float* theta = outer_.data() + s.offset;
      for (int64_t j = 0; j < s.numel; ++j) x[j] = theta[j] - x[j];
      if (ef && dumping) {
        const float* e = fr.feedback[i]->residual().data();
        std::copy(e, e + s.numel, fr.sent_residuals.begin() + at);
      }
      key_rotation(fr, i);
      // With EF the codec is the ErrorFeedback decorator: it sends Delta_i + e_i and keeps
      // e_i <- what the group will not decode from this replica's wire (the same key).
      fr.codecs[i]->encode(x, fr.send.data() + fr.wire_offset[i]);
      at += s.numel;
    }
    if (fr.wire_total > 0)
      fr.tickets.push_back(exchange_->allgather(fr.send.data(), fr.gathered.data(), size_t(fr.wire_total)));
  }
  fr.state = State::InFlight;
}

void Diloco::key_rotation(Fragment& fr, size_t i) {
  // The sync's start step and the span: alike on every replica and after a resume. Unrotated
  // methods keep their keys (their stochastic rounding keys by the inputs).
  if (cfg_.outer_rotation > 0) fr.codecs[i]->set_message_key(make_key(uint64_t(fr.started_at), uint64_t(i)));
}

void Diloco::apply(int f, PhaseTimers* timers) {
  Fragment& fr = fragments_[size_t(f)];
  {
    const double t0 = now_seconds();
    double busy = 0;
    for (BackgroundCollectives::Ticket ticket : fr.tickets) {
      const BackgroundCollectives::Done d = exchange_->wait(ticket);
      fr.bytes += d.bytes;
      busy += d.end - d.start;
      if (timers) timers->add_event(fmt::format("diloco outer all-reduce fragment {} (from step {})", f, fr.started_at),
                                    d.start, d.end, 1);
    }
    fr.tickets.clear();
    if (timers) {
      // The main thread's wait is the exposed part; dp_busy the collectives' own time.
      timers->add("dp_allreduce", now_seconds() - t0);
      timers->add("dp_busy", busy);
      timers->add_event(fmt::format("diloco wait fragment {}", f), t0, now_seconds());
    }
  }
  // The replicas' mean and the pseudo-gradient Delta = theta - mean, packed in span order.
  std::vector<float> mean(size_t(fr.numel)), delta(size_t(fr.numel));
  const float D = float(dp_size_);
  if (!cfg_.outer_comp) {
    int64_t at = 0;
    for (const Span& s : fr.spans) {
      const float* theta = outer_.data() + s.offset;
      for (int64_t j = 0; j < s.numel; ++j) {
        mean[size_t(at + j)] = fr.send[size_t(at + j)] / D;
        delta[size_t(at + j)] = theta[j] - mean[size_t(at + j)];
      }
      at += s.numel;
    }
  } else {
    const double t0 = now_seconds();
    int64_t at = 0;
    for (size_t i = 0; i < fr.spans.size(); ++i) {
      const Span& s = fr.spans[i];
      float* sum = delta.data() + at;
      // Rank 0's wire first, then each next rank's added: one order on every rank.
      key_rotation(fr, i);
      fr.codecs[i]->decode(fr.gathered.data() + fr.wire_offset[i], sum);
      for (int r = 1; r < dp_size_; ++r) {
        fr.codecs[i]->decode(fr.gathered.data() + int64_t(r) * fr.wire_total + fr.wire_offset[i], scratch_.data());
        for (int64_t j = 0; j < s.numel; ++j) sum[j] += scratch_[size_t(j)];
      }
      const float* theta = outer_.data() + s.offset;
      for (int64_t j = 0; j < s.numel; ++j) {
        sum[j] /= D;
        mean[size_t(at + j)] = theta[j] - sum[j];
      }
      at += s.numel;
    }
    if (timers) {
      timers->add("decompress", now_seconds() - t0);
      timers->add_event(fmt::format("diloco decode fragment {}", f), t0, now_seconds());
    }
  }
  const double t0 = now_seconds();
  std::vector<float> outer_before, momentum_before;
  if (!dump_dir_.empty()) {
    for (const Span& s : fr.spans) {
      outer_before.insert(outer_before.end(), outer_.begin() + s.offset, outer_.begin() + s.offset + s.numel);
      momentum_before.insert(momentum_before.end(), momentum_.begin() + s.offset,
                             momentum_.begin() + s.offset + s.numel);
    }
  }
  int64_t at = 0;
  for (const Span& s : fr.spans) {
    diloco_outer_step(outer_.data() + s.offset, momentum_.data() + s.offset, mean.data() + at, delta.data() + at,
                      s.numel, cfg_.outer_lr, cfg_.outer_momentum);
    at += s.numel;
  }
  if (timers) timers->add("optimizer", now_seconds() - t0);
  if (!dump_dir_.empty()) {
    std::vector<float> outer_after, momentum_after;
    for (const Span& s : fr.spans) {
      outer_after.insert(outer_after.end(), outer_.begin() + s.offset, outer_.begin() + s.offset + s.numel);
      momentum_after.insert(momentum_after.end(), momentum_.begin() + s.offset, momentum_.begin() + s.offset + s.numel);
    }
    std::vector<std::pair<std::string, const float*>> arrays{
        {"local", fr.sent_locals.data()},         {"outer_before", outer_before.data()},
        {"momentum_before", momentum_before.data()}, {"outer_after", outer_after.data()},
        {"momentum_after", momentum_after.data()}, {"mean", mean.data()}, {"delta", delta.data()}};
    if (cfg_.outer_error_feedback) arrays.emplace_back("residual_before", fr.sent_residuals.data());
    dump(f, "apply", arrays);
  }
  fr.state = State::Applied;
}

void Diloco::land(int f, DeviceBuffer<float>& params, PhaseTimers& timers, TrafficCounters& counters) {
  Fragment& fr = fragments_[size_t(f)];
  if (fr.state == State::InFlight) apply(f, &timers);
  ScopedPhase scope(timers, "optimizer", fmt::format("diloco land fragment {}", f));
  const bool dumping = !dump_dir_.empty();
  std::vector<float> before, after;
  const double alpha = cfg_.mixing;
  for (const Span& s : fr.spans) {
    const float* theta = outer_.data() + s.offset;
    if (cfg_.overlap_steps == 0 && !dumping) {
      params.copy_from_host(theta, size_t(s.numel), size_t(s.offset));  // the replicas restart from theta
      continue;
    }
    float* x = scratch_.data();
    params.copy_to_host(x, size_t(s.numel), size_t(s.offset));
    if (dumping) before.insert(before.end(), x, x + s.numel);
    if (cfg_.overlap_steps == 0)
      std::copy(theta, theta + s.numel, x);
    else  // Streaming DiLoCo's merge of the update that arrived with the tau steps made meanwhile
      for (int64_t j = 0; j < s.numel; ++j) x[j] = float(alpha * double(x[j]) + (1.0 - alpha) * double(theta[j]));
    params.copy_from_host(x, size_t(s.numel), size_t(s.offset));
    if (dumping) after.insert(after.end(), x, x + s.numel);
  }
  if (dumping) dump(f, "land", {{"local_before", before.data()}, {"local_after", after.data()}});
  counters.add(Traffic::DataParallel, fr.bytes);
  fr.bytes = 0;
  fr.state = State::Idle;
}

void Diloco::dump(int f, const std::string& what,
                  const std::vector<std::pair<std::string, const float*>>& arrays) const {
  const Fragment& fr = fragments_[size_t(f)];
  TensorFileWriter w({{"fragment", f}, {"started_at", fr.started_at}, {"dp_size", dp_size_}});
  for (const auto& [array, values] : arrays) {
    int64_t at = 0;
    for (const Span& s : fr.spans) {
      w.add(array + "/" + s.name, values + at, s.shape);
      at += s.numel;
    }
  }
  std::filesystem::create_directories(dump_dir_);
  w.write(fmt::format("{}/sync_{:06d}_f{}_{}_{}.bin", dump_dir_, fr.started_at, f, what, dump_tag_));
}

TensorFileWriter Diloco::state(const DeviceBuffer<float>& params, const AdamW& adam, int64_t iteration) {
  // A sync in flight: its collectives finish and its outer step applies now,
  // the same arithmetic as at its landing, which is still to come.
  for (size_t f = 0; f < fragments_.size(); ++f)
    if (fragments_[f].state == State::InFlight) apply(int(f), nullptr);
  TensorFileWriter w({{"format", "optimus-cc diloco state"},
                      {"iteration", iteration},
                      {"dp_size", dp_size_},
                      {"dp_rank", dp_rank_},
                      {"diloco", cfg_.to_json()}});
  // Host copies, each made once (the file's tensors are views into them).
  const auto local = std::make_shared<const std::vector<float>>(params.to_host());
  const auto m = std::make_shared<const std::vector<float>>(adam.m().to_host());
  const auto v = std::make_shared<const std::vector<float>>(adam.v().to_host());
  OCC_CHECK(m->size() == local->size() && v->size() == local->size(),
            "internal: DiLoCo saves whole AdamW moments ({} / {} values for {} parameters)", m->size(), v->size(),
            local->size());
  for (const Fragment& fr : fragments_)
    for (size_t i = 0; i < fr.spans.size(); ++i) {
      const Span& s = fr.spans[i];
      w.add_view("local/param/" + s.name, local, local->data() + s.offset, s.shape);
      w.add_view("local/adam_m/" + s.name, m, m->data() + s.offset, s.shape);
      w.add_view("local/adam_v/" + s.name, v, v->data() + s.offset, s.shape);
      w.add("outer/param/" + s.name, outer_.data() + s.offset, s.shape);
      w.add("outer/momentum/" + s.name, momentum_.data() + s.offset, s.shape);
      // The residual after the latest encode (a sync in flight has encoded: its residual is current).
      if (cfg_.outer_error_feedback) w.add("outer/residual/" + s.name, fr.feedback[i]->residual().data(), s.shape);
    }
  return w;
}

void Diloco::resume(const std::string& path, DeviceBuffer<float>& params, AdamW& adam, int64_t iteration, bool print) {
  if (load(path, params, adam, iteration)) {
    if (print && !load_notice_.empty()) std::printf("notice: %s\n", load_notice_.c_str());
    return;
  }
  restart_from(params);
  if (print) std::printf("notice: checkpoint has no DiLoCo state; the outer parameters start from its weights\n");
}

void Diloco::note_unused_state(const std::string& path, bool print) {
  if (print && std::filesystem::exists(path))
    std::printf("notice: checkpoint holds DiLoCo state that this run does not use; it continues from DP replica 0's "
                "parameters\n");
}

bool Diloco::load(const std::string& path, DeviceBuffer<float>& params, AdamW& adam, int64_t iteration) {
  if (!std::filesystem::exists(path)) return false;
  TensorFileReader r = TensorFileReader::open(path);
  const nlohmann::json& meta = r.meta();
  OCC_CHECK(meta.value("format", "") == "optimus-cc diloco state", "{} is not an optimus-cc DiLoCo state file", path);
  OCC_CHECK(meta.value("dp_size", -1) == dp_size_,
            "checkpoint {} holds the DiLoCo state of {} replicas, but this run has data-parallel size {}; resume "
            "with {} replicas (each keeps its own parameters and AdamW state)",
            path, meta.value("dp_size", -1), dp_size_, meta.value("dp_size", -1));
  const nlohmann::json saved = meta.value("diloco", nlohmann::json());
  for (const char* key : {"inner_steps", "fragments", "overlap_steps"})
    OCC_CHECK(saved.is_object() && saved.value(key, -1) == cfg_.to_json()[key].get<int>(),
              "checkpoint {} was saved with DiLoCo {} = {} but this run has {}; resume with the saved run's "
              "--diloco-inner-steps, --diloco-fragments and --diloco-overlap-steps (its rounds are under way)",
              path, key, saved.is_object() ? saved.value(key, nlohmann::json()).dump() : "null",
              cfg_.to_json()[key].dump());
  std::vector<float> local(outer_.size()), m(outer_.size()), v(outer_.size());
  for (const Fragment& fr : fragments_)
    for (const Span& s : fr.spans) {
      r.read("local/param/" + s.name, local.data() + s.offset, s.numel);
      r.read("local/adam_m/" + s.name, m.data() + s.offset, s.numel);
      r.read("local/adam_v/" + s.name, v.data() + s.offset, s.numel);
      r.read("outer/param/" + s.name, outer_.data() + s.offset, s.numel);
      r.read("outer/momentum/" + s.name, momentum_.data() + s.offset, s.numel);
    }
  // The error-feedback residual: read where this run keeps one and the file has it; a file
  // without it (saved without EF) starts it at zero, and one this run does not use is dropped.
  bool saved_residual = true;
  for (const Fragment& fr : fragments_)
    for (const Span& s : fr.spans) saved_residual = saved_residual && r.has("outer/residual/" + s.name);
  load_notice_.clear();
  if (cfg_.outer_error_feedback) {
    for (Fragment& fr : fragments_)
      for (size_t i = 0; i < fr.spans.size(); ++i) {
        float* e = fr.feedback[i]->residual().data();
        if (saved_residual)
          r.read("outer/residual/" + fr.spans[i].name, e, fr.spans[i].numel);
        else
          std::fill(e, e + fr.spans[i].numel, 0.0f);
      }
  }
  if (cfg_.outer_error_feedback && !saved_residual) {
    load_notice_ = "checkpoint has no DiLoCo outer error-feedback residual; it starts at zero";
  } else if (!cfg_.outer_error_feedback && saved_residual && !fragments_.empty() && !fragments_.front().spans.empty()) {
    load_notice_ = "checkpoint holds a DiLoCo outer error-feedback residual that this run does not use (no "
                   "--diloco-outer-comp-error-feedback); it is dropped";
  }
  params.assign_from_host(local);
  adam.m().assign_from_host(m);
  adam.v().assign_from_host(v);
  // A sync that was in flight at the save was applied then; it lands on schedule.
  for (int f = 0; f < int(fragments_.size()); ++f) {
    Fragment& fr = fragments_[size_t(f)];
    fr.started_at = schedule_.in_flight_after(iteration, f);
    fr.state = fr.started_at >= 0 ? State::Applied : State::Idle;
    fr.bytes = 0;
  }
  return true;
}

}  // namespace occ
