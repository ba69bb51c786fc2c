#include "train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "compress/fused_embedding.h"
#include "core/tensor_file.h"
#include "core/timer.h"
#include "data/tokenizer.h"
#include "parallel/pipeline_schedule.h"
#include "train/checkpoint.h"
#include "train/checkpoint_store.h"
#include "train/metrics.h"

namespace occ {

namespace {
std::string format_duration(double seconds) {
  int64_t s = int64_t(seconds + 0.5);
  return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
}
}  // namespace

Trainer::Trainer(TrainOptions options, int world_rank, int world_size)
    : opt_(std::move(options)), world_rank_(world_rank), world_size_(world_size) {
  layout_ = ParallelLayout::from_rank(world_rank, world_size, opt_.tensor_parallel, opt_.pipeline_parallel);
  OCC_CHECK(!opt_.data_path.empty(), "--data-path is required (a dataset prefix written by 'optimus-cc preprocess')");
  if (!opt_.tokenizer_model.empty()) opt_.model.vocab_size = Tokenizer::load(opt_.tokenizer_model).vocab_size();
  OCC_CHECK(opt_.model.vocab_size > 0, "--tokenizer-model (or --vocab-size) is required to size the vocabulary");
  opt_.validate(layout_);
  opt_.grad_comp.error_feedback = opt_.cb.lazy_error;  // one flag for LEP and DP error feedback, as the prototype

  dataset_ = std::make_unique<IndexedDataset>(IndexedDataset::open(opt_.data_path));
  check_token_range();
  auto splits = split_documents(dataset_->num_documents(), opt_.split);
  const int64_t gb = opt_.global_batch_size;
  train_data_ = std::make_unique<GptDataset>(*dataset_, splits[0], opt_.model.seq_length, opt_.train_iters * gb,
                                             opt_.seed, "train");
  if (opt_.eval_iters > 0 && splits[1].size() > 0)
    valid_data_ = std::make_unique<GptDataset>(*dataset_, splits[1], opt_.model.seq_length, opt_.eval_iters * gb,
                                               opt_.seed, "validation");
  if (is_logger() && !opt_.metrics_path.empty()) {
    metrics_ = std::fopen(opt_.metrics_path.c_str(), "a");
    OCC_CHECK(metrics_, "cannot open --metrics file {} for appending; check the path", opt_.metrics_path);
  }
  // In-place progress only on a real terminal of a single process (mpirun relays output line by line).
  tty_ = is_logger() && world_size_ == 1 && isatty(STDOUT_FILENO) && !std::getenv("OMPI_COMM_WORLD_SIZE");
}

// Every token id must index the embedding. Checked before training, on every
// rank alike, so a mismatched tokenizer is reported once instead of by every
// rank that reads the offending sample mid-run.
void Trainer::check_token_range() const {
  std::vector<int32_t> buf;
  const int V = opt_.model.vocab_size;
  for (int64_t seq = 0; seq < dataset_->num_sequences(); ++seq) {
    const int64_t n = dataset_->sequence_length(seq);
    buf.resize(size_t(n));
    dataset_->read(seq, 0, n, buf.data());
    for (int32_t t : buf)
      OCC_CHECK(t >= 0 && t < V,
                "token id {} in {} is outside the tokenizer's vocabulary of {}; use the --tokenizer-model the data "
                "was preprocessed with",
                t, opt_.data_path, V);
  }
}

Trainer::~Trainer() {
  if (metrics_) std::fclose(metrics_);
}

void Trainer::connect(double comm_timeout_s) {
  topo_ = Topology::create(opt_.tensor_parallel, opt_.pipeline_parallel, comm_timeout_s);
  stage_ = std::make_unique<GptStage>(opt_.model, layout_, *topo_->tp, opt_.seed);
  if (!opt_.trace_path.empty()) stage_->timers().enable_trace();
  optimizer_ = std::make_unique<AdamW>(stage_->param_layout(), opt_.adam);
  const ParamLayout& pl = stage_->param_layout();

  // Which gradients take which path: FE's word embedding goes around the DP
  // all-reduce; DP PowerSGD takes the matrices of compressing stages.
  // (With DP = 1 there is no DP traffic to compress.)
  const bool compress_stage = opt_.grad_comp.stage_compresses(layout_.pp_rank) && layout_.dp_size > 1;
  auto fused = [&](const ParamTensor& t) { return opt_.emb_comm_opt && t.word_embedding; };
  auto compressible = [&](const ParamTensor& t) { return compress_stage && t.shape.size() >= 2 && !fused(t); };
  std::vector<ParamTensor> to_compress;
  for (const auto& t : pl.tensors())
    if (compressible(t)) to_compress.push_back(t);
  if (compress_stage) dp_comp_ = std::make_unique<DataParallelPowerSgd>(opt_.grad_comp, to_compress, opt_.seed);
  reducer_ = std::make_unique<DataParallelReducer>(
      *topo_->dp_async,
      make_buckets(pl, opt_.dp_bucket_elems, [&](const ParamTensor& t) { return fused(t) ? -1 : compressible(t) ? 1 : 0; }),
      stage_->grads().data());
  exchange_ = std::make_unique<PipelineExchange>(*topo_->pp, *topo_->tp, layout_, stage_->timers());

  if (opt_.cb.enabled) {
    // The matrix one TP rank sends backward: its 1/T slice of [tokens, hidden].
    const int64_t rows = int64_t(opt_.micro_batch_size) * opt_.model.seq_length / layout_.tp_size;
    const int64_t cols = opt_.model.hidden_size;
    OCC_CHECK(int64_t(opt_.micro_batch_size) * opt_.model.seq_length % layout_.tp_size == 0,
              "--inter-grad-comp needs micro-batch x seq-length divisible by --tensor-model-parallel-size");
    // Link key: the sending stage and TP rank (each link has its own warm start).
    if (!layout_.first_stage())
      cb_send_ = std::make_unique<CompressedBackprop>(opt_.cb, rows, cols, opt_.seed,
                                                      uint64_t(layout_.pp_rank) * 1000 + uint64_t(layout_.tp_rank));
    if (!layout_.last_stage())
      cb_recv_ = std::make_unique<CompressedBackprop>(opt_.cb, rows, cols, opt_.seed, 0);
  }
}

bool Trainer::dp_compressing() const {
  return dp_comp_ && double(iteration_) >= double(opt_.grad_comp.warmup_fraction) * double(opt_.train_iters);
}

void Trainer::load() {
  if (opt_.load.empty()) return;
  CheckpointPosition pos = load_checkpoint(opt_.load, opt_, layout_, *stage_, optimizer_.get());
  load_compression_state();
  iteration_ = pos.iteration;
  consumed_samples_ = pos.consumed_samples;
  OCC_CHECK(iteration_ <= opt_.train_iters,
            "checkpoint {} is at iteration {}, beyond --train-iters {}; raise --train-iters to continue", opt_.load,
            iteration_, opt_.train_iters);
  if (is_logger()) std::printf("loaded checkpoint %s at iteration %lld\n", opt_.load.c_str(), (long long)iteration_);
}

void Trainer::read_micro_batch(const GptDataset& data, int64_t first_sample, int slot) {
  // Only the first stage needs inputs and only the last needs labels.
  if (!layout_.first_stage() && !layout_.last_stage()) return;
  const int T = opt_.model.seq_length, B = opt_.micro_batch_size;
  tokens_.resize(size_t(T + 1));
  inputs_[size_t(slot)].resize(size_t(B) * T);
  labels_[size_t(slot)].resize(size_t(B) * T);
  for (int b = 0; b < B; ++b) {
    data.sample(first_sample + b, tokens_.data());
    std::copy(tokens_.begin(), tokens_.end() - 1, inputs_[size_t(slot)].begin() + b * T);
    std::copy(tokens_.begin() + 1, tokens_.end(), labels_[size_t(slot)].begin() + b * T);
  }
}

MicroBatch Trainer::micro_batch(int slot, int64_t sample_base, float grad_scale) const {
  return MicroBatch{inputs_[size_t(slot)].data(), labels_[size_t(slot)].data(), opt_.micro_batch_size,
                    opt_.model.seq_length, sample_base, iteration_, grad_scale};
}

// One iteration of non-interleaved 1F1B on this stage.
void Trainer::run_schedule(int64_t M, double& loss_sum) {
  PhaseTimers& timers = stage_->timers();
  const int mbs = opt_.micro_batch_size, T = opt_.model.seq_length;
  const size_t NC = size_t(mbs) * T * size_t(opt_.model.hidden_size);
  const int P = layout_.pp_size, s = layout_.pp_rank;
  const int pool = int(std::min<int64_t>(P - s, M));
  if (acts_.size() < size_t(pool)) acts_.resize(size_t(pool));
  inputs_.resize(size_t(pool));
  labels_.resize(size_t(pool));
  fwd_send_.resize(size_t(M));
  bwd_send_.resize(size_t(M));
  x_in_.resize(NC);
  dx_out_.resize(NC);
  const float grad_scale = 1.0f / float(int64_t(mbs) * T * M);
  const std::function<void(int64_t)> on_final = [this](int64_t offset) { reducer_->grads_final_from(offset); };

  // Times a compute scope excluding the TP collectives inside it.
  auto compute = [&](const char* phase, const std::string& event, auto&& body) {
    const double t0 = now_seconds(), tp0 = timers.ms("tp_allreduce");
    body();
    const double t1 = now_seconds();
    timers.add(phase, (t1 - t0) - (timers.ms("tp_allreduce") - tp0) / 1e3);
    timers.add_event(event, t0, t1);
  };

  for (const PipelineOp& op : one_f_one_b(P, s, int(M))) {
    const int j = op.micro_batch, slot = j % pool;
    // Megatron sampler order: micro-batch j of DP rank d holds global-batch
    // samples [j*mbs*DP + d*mbs, +mbs).
    const int64_t sample_base = int64_t(j) * mbs * layout_.dp_size + int64_t(layout_.dp_rank) * mbs;
    if (op.kind == PipelineOp::Forward) {
      {
        ScopedPhase t(timers, "data");
        read_micro_batch(*train_data_, consumed_samples_ + sample_base, slot);
      }
      if (!layout_.first_stage()) exchange_->recv_forward(x_in_.data(), NC, j);
      auto& out = fwd_send_[size_t(j)];
      out.resize(layout_.last_stage() ? 0 : NC);
      const MicroBatch mb = micro_batch(slot, sample_base, grad_scale);
      compute("forward", fmt::format("F{}", j),
              [&] { loss_sum += stage_->forward(acts_[size_t(slot)], mb, x_in_.data(), out.data(), true); });
      if (!layout_.last_stage()) exchange_->send_forward(out.data(), NC, j);
    } else {
      // CB/EC: sender and receiver derive from the schedule whether this message is compressed.
      const bool compressed_in = CompressedBackprop::compresses(opt_.cb, P, s + 1, int(M), j);
      const bool compressed_out = CompressedBackprop::compresses(opt_.cb, P, s, int(M), j);
      if (!layout_.last_stage())
        exchange_->recv_backward(dx_out_.data(), NC, j, compressed_in ? cb_recv_.get() : nullptr);
      auto& out = bwd_send_[size_t(j)];
      out.resize(layout_.first_stage() ? 0 : NC);
      const MicroBatch mb = micro_batch(slot, sample_base, grad_scale);
      compute("backward", fmt::format("B{}", j), [&] {
        stage_->backward(acts_[size_t(slot)], mb, dx_out_.data(), out.data(), j == M - 1 ? on_final : nullptr);
      });
      if (!layout_.first_stage()) {
        if (compressed_out && opt_.check_lep && layout_.last_stage()) check_lep(slot, out.data());
        exchange_->send_backward(out.data(), NC, j, compressed_out ? cb_send_.get() : nullptr);
        timers.count("cb_sends", 1);
        timers.count("cb_compressed", compressed_out ? 1 : 0);
      }
    }
  }
  exchange_->wait_sends();
}

IterationStats Trainer::train_step() {
  const double start = now_seconds(), cpu_start = process_cpu_seconds();
  PhaseTimers& timers = stage_->timers();
  timers.reset();
  topo_->counters.reset();
  const int T = opt_.model.seq_length;
  const int64_t M = opt_.num_micro_batches(layout_.dp_size);
  stage_->zero_grads();
  reducer_->begin_iteration(dp_compressing());

  double loss_sum = 0.0;
  run_schedule(M, loss_sum);

  sync_gradients();
  const ParamLayout& pl = stage_->param_layout();
  auto& grads = stage_->grads();
  IterationStats s;
  s.iteration = iteration_ + 1;
  {
    // Its own phase: stages that finished early wait here for the slowest one.
    ScopedPhase t(timers, "norm_allreduce");
    double sq = local_grad_sq_norm(pl, grads.data());
    topo_->model->allreduce_sum(&sq, 1, Traffic::Other);
    s.grad_norm = std::sqrt(sq);
  }
  {
    ScopedPhase t(timers, "optimizer");
    clip_grads(grads.data(), int64_t(grads.size()), s.grad_norm, opt_.clip_grad);
    s.lr = opt_.lr_schedule().at(s.iteration);
    optimizer_->update(stage_->params().data(), grads.data(), s.lr, s.iteration);
  }
  // Loss of the global batch: the last stage's sums (one TP rank each), over DP.
  double loss = layout_.last_stage() && layout_.tp_rank == 0 ? loss_sum : 0.0;
  topo_->world->allreduce_sum(&loss, 1, Traffic::Other);
  s.loss = loss / double(int64_t(opt_.global_batch_size) * T);
  iteration_ += 1;
  consumed_samples_ += opt_.global_batch_size;
  s.ms = (now_seconds() - start) * 1e3;
  timers.add("cpu", process_cpu_seconds() - cpu_start);
  timers.add("iteration", s.ms / 1e3);
  s.tokens_per_s = double(opt_.global_batch_size) * T / (s.ms / 1e3);
  return s;
}

// After the schedule: DP averaging (bucketed, already running; then PowerSGD
// for the compressed matrices) and the tied word-embedding synchronisation.
void Trainer::sync_gradients() {
  PhaseTimers& timers = stage_->timers();
  const double t0 = now_seconds();
  timers.add("dp_allreduce", reducer_->finish());
  timers.add("dp_busy", reducer_->busy_seconds());
  timers.add_event("dp_allreduce wait", t0, now_seconds());
  for (auto& e : reducer_->take_events()) timers.add_event(e.name, e.start, e.end, 1);
  if (dp_compressing()) dp_comp_->reduce(stage_->grads().data(), *topo_->dp, timers);

  const ParamLayout& pl = stage_->param_layout();
  for (const auto& t : pl.tensors()) {
    if (!t.word_embedding) continue;
    float* g = stage_->grads().data() + t.offset;
    ScopedPhase scope(timers, "emb_allreduce");
    if (opt_.emb_comm_opt)
      fused_embedding_sync(*topo_, g, size_t(t.numel));
    else
      sync_tied_embedding(*topo_, g, size_t(t.numel));
  }
}

// --check-lep (last stage): the LEP residual left by micro-batch k-1 against
// the change of this stage's input activations from k-1 to k (paper Fig. 11),
// and its size against the fresh gradient (grad: the whole micro-batch's) it joins.
void Trainer::check_lep(int slot, const float* grad) {
  const std::vector<float>* e = cb_send_->residual();
  const size_t n = e->size();
  const float* x = acts_[size_t(slot)].layers.empty() ? acts_[size_t(slot)].output.data()
                                                      : acts_[size_t(slot)].layers[0].input.data();
  x += n * size_t(layout_.tp_rank);  // this TP rank's slice, as the exchange sends it
  grad += n * size_t(layout_.tp_rank);
  if (lep_prev_input_.size() == n) {
    double dot = 0, ee = 0, dd = 0, gg = 0, xx = 0, esum = 0, dsum = 0;
    for (size_t i = 0; i < n; ++i) {
      const double d = double(x[i]) - lep_prev_input_[i], ei = (*e)[i];
      dot += ei * d;
      ee += ei * ei;
      dd += d * d;
      gg += double(grad[i]) * grad[i];
      xx += double(x[i]) * x[i];
      esum += ei;
      dsum += d;
    }
    PhaseTimers& timers = stage_->timers();
    timers.count("lep_samples", 1);
    timers.count("lep_cosine", ee > 0 && dd > 0 ? dot / std::sqrt(ee * dd) : 0.0);
    timers.count("lep_error_mean", esum / double(n));
    timers.count("lep_delta_mean", dsum / double(n));
    // LEP's premises, as ratios: a residual small next to the gradient it joins,
    // and activations that micro-batches share (delta small next to x).
    timers.count("lep_error_ratio", gg > 0 ? std::sqrt(ee / gg) : 0.0);
    timers.count("lep_delta_ratio", xx > 0 ? std::sqrt(dd / xx) : 0.0);
  }
  lep_prev_input_.assign(x, x + n);
}

double Trainer::evaluate() {
  OCC_CHECK(valid_data_, "no validation data: the --split gives the validation set no documents, or --eval-iters is 0");
  const int mbs = opt_.micro_batch_size, T = opt_.model.seq_length;
  const size_t NC = size_t(mbs) * T * size_t(opt_.model.hidden_size);
  const int64_t total = opt_.eval_iters * opt_.global_batch_size;
  const int64_t per_step = int64_t(mbs) * layout_.dp_size;
  inputs_.resize(std::max<size_t>(inputs_.size(), 1));
  labels_.resize(std::max<size_t>(labels_.size(), 1));
  x_in_.resize(NC);
  std::vector<float> out(NC);
  StageActivations acts;
  double loss_sum = 0.0;
  // The same first eval_iters global batches every time, so points on the curve compare.
  for (int64_t j = 0; j * per_step < total; ++j) {
    const int64_t base = j * per_step + int64_t(layout_.dp_rank) * mbs;
    read_micro_batch(*valid_data_, base, 0);
    if (!layout_.first_stage()) exchange_->recv_forward(x_in_.data(), NC, int(j));
    loss_sum += stage_->forward(acts, micro_batch(0, base, 0.0f), x_in_.data(), out.data(), false);
    if (!layout_.last_stage()) {
      exchange_->send_forward(out.data(), NC, int(j));
      exchange_->wait_sends();  // `out` is reused by the next micro-batch
    }
  }
  double loss = layout_.last_stage() && layout_.tp_rank == 0 ? loss_sum : 0.0;
  topo_->world->allreduce_sum(&loss, 1, Traffic::Other);
  return loss / double(total * T);
}

void Trainer::log_iteration(const IterationStats& s) {
  const nlohmann::json ranks = gather_rank_metrics(*topo_, stage_->timers());
  if (!is_logger()) return;
  nlohmann::json j = {{"iter", s.iteration},     {"loss", s.loss}, {"lr", s.lr},
                      {"grad_norm", s.grad_norm}, {"ms", s.ms},     {"tokens_per_s", s.tokens_per_s},
                      {"consumed_samples", consumed_samples_}};
  if (s.val_loss) j["val_loss"] = *s.val_loss;
  summarize_rank_metrics(ranks, j);
  for (auto& [k, v] : j["bytes"].items()) traffic_sent_[k] = traffic_sent_.value(k, 0.0) + v.get<double>();
  if (j.contains("bytes_saved"))
    for (auto& [k, v] : j["bytes_saved"].items()) traffic_saved_[k] = traffic_saved_.value(k, 0.0) + v.get<double>();
  if (metrics_) {
    std::fprintf(metrics_, "%s\n", j.dump().c_str());
    std::fflush(metrics_);
  }
  const bool show = s.iteration % opt_.log_interval == 0 || s.iteration == opt_.train_iters || s.val_loss;
  if (!show) return;
  const double elapsed = now_seconds() - run_start_;
  const double per_iter = elapsed / double(s.iteration - first_iteration_);
  const std::string line = fmt::format(
      "iter {:>{}}/{} | loss {:.4f} | lr {:.3e} | grad norm {:.3f} | {:.0f} tok/s | {:.1f} ms/it | ETA {}",
      s.iteration, int(std::to_string(opt_.train_iters).size()), opt_.train_iters, s.loss, s.lr, s.grad_norm,
      s.tokens_per_s, s.ms, format_duration(per_iter * double(opt_.train_iters - s.iteration)));
  if (tty_ && !s.val_loss && s.iteration != opt_.train_iters) {
    std::printf("\r%s\033[K", line.c_str());
  } else {
    std::printf("%s%s\n", tty_ ? "\r\033[K" : "", line.c_str());
  }
  if (s.val_loss)
    std::printf("validation loss at iter %lld: %.4f (ppl %.2f)\n", (long long)s.iteration, *s.val_loss,
                std::exp(*s.val_loss));
  std::fflush(stdout);
}

void Trainer::run() {
  if (is_logger())
    std::printf("model: %lld parameters (%d layers, hidden %d, %d heads, seq %d, vocab %d padded to %d); "
                "TP %d x PP %d x DP %d; %lld micro-batches of %d per iteration\n",
                (long long)opt_.model.num_parameters(), opt_.model.num_layers, opt_.model.hidden_size,
                opt_.model.num_attention_heads, opt_.model.seq_length, opt_.model.vocab_size,
                opt_.model.padded_vocab_size(), layout_.tp_size, layout_.pp_size, layout_.dp_size,
                (long long)opt_.num_micro_batches(layout_.dp_size), opt_.micro_batch_size);
  if (valid_data_ && iteration_ == 0) {
    const double v = evaluate();
    if (is_logger()) std::printf("validation loss at start: %.4f\n", v);
  }
  run_start_ = now_seconds();
  first_iteration_ = iteration_;
  while (iteration_ < opt_.train_iters) {
    IterationStats s = train_step();
    const bool last = iteration_ == opt_.train_iters;
    if (valid_data_ && ((opt_.eval_interval > 0 && iteration_ % opt_.eval_interval == 0) || last))
      s.val_loss = evaluate();
    log_iteration(s);
    if (!opt_.save.empty() && ((opt_.save_interval > 0 && iteration_ % opt_.save_interval == 0) || last))
      save_checkpoint();
  }
  if (!opt_.trace_path.empty()) write_trace();
  if (is_logger() && world_size_ > 1) print_traffic_summary();
}

// Bytes all ranks sent per class over the run, and what compression saved.
void Trainer::print_traffic_summary() const {
  std::printf("traffic over %lld iterations (all ranks):", (long long)(iteration_ - first_iteration_));
  double sent = 0, saved = 0;
  for (auto& [k, v] : traffic_sent_.items()) {
    if (v.get<double>() == 0) continue;
    const double sv = traffic_saved_.value(k, 0.0);
    std::printf(" %s %.1f MB", k.c_str(), v.get<double>() / 1e6);
    if (sv != 0) std::printf(" (%.1f MB without compression)", (v.get<double>() + sv) / 1e6);
    std::printf(",");
    sent += v.get<double>();
    saved += sv;
  }
  std::printf(" total %.1f MB", sent / 1e6);
  if (saved != 0) std::printf("; compression kept %.1f MB (%.0f%%) off the wire", saved / 1e6, 100.0 * saved / (sent + saved));
  std::printf("\n");
}

void Trainer::save_checkpoint() {
  std::string staging;
  if (is_logger()) staging = begin_checkpoint(opt_.save, iteration_);
  topo_->world->barrier();
  if (staging.empty()) staging = opt_.save + fmt::format("/iter_{:07d}.tmp", iteration_);
  if (layout_.dp_rank == 0)
    write_checkpoint_shard(staging, opt_, layout_, *stage_, *optimizer_, {iteration_, consumed_samples_});
  // Compressor state differs per DP rank (local errors), so every rank saves its own.
  save_compression_state(staging);
  topo_->world->barrier();
  if (is_logger()) {
    commit_checkpoint(opt_.save, iteration_);
    std::printf("saved checkpoint %s/iter_%07lld\n", opt_.save.c_str(), (long long)iteration_);
  }
}

namespace {
std::string compression_state_file(const std::string& dir, const ParallelLayout& l) {
  return shard_dir(dir, l.tp_rank, l.pp_rank) + fmt::format("/compress_dp_{:03d}.bin", l.dp_rank);
}
}  // namespace

void Trainer::save_compression_state(const std::string& staging) {
  if (!cb_send_ && !dp_comp_) return;
  make_shard_dir(staging, layout_.tp_rank, layout_.pp_rank);
  TensorFileWriter w(nlohmann::json{{"iteration", iteration_}, {"config", opt_.to_json()}});
  if (cb_send_) cb_send_->save_state(w);
  if (dp_comp_) dp_comp_->save_state(w);
  w.write(compression_state_file(staging, layout_));
}

// Local (runs inside the command line's error agreement); the notice is
// printed by announce_compression_state() once every rank has loaded.
void Trainer::load_compression_state() {
  CheckpointStore store(opt_.load);
  const std::string path = compression_state_file(store.iteration_dir(*store.latest()), layout_);
  const bool saved = std::filesystem::exists(path);
  const bool wanted = cb_send_ || dp_comp_;
  compression_notice_ = 0;
  if (saved && !wanted) compression_notice_ = 1;
  if (!saved && wanted) compression_notice_ = 2;
  if (!saved || !wanted) return;
  TensorFileReader r = TensorFileReader::open(path);
  bool complete = true;
  if (cb_send_) complete &= cb_send_->load_state(r);
  if (dp_comp_) complete &= dp_comp_->load_state(r);
  if (!complete) compression_notice_ = 3;
}

void Trainer::announce_compression_state() {
  if (opt_.load.empty()) return;
  // Which situations occurred on any rank (bit per notice).
  double flags[3] = {compression_notice_ == 1 ? 1.0 : 0.0, compression_notice_ == 2 ? 1.0 : 0.0,
                     compression_notice_ == 3 ? 1.0 : 0.0};
  topo_->world->allreduce_sum(flags, 3, Traffic::Other);
  if (!is_logger()) return;
  if (flags[0] > 0) std::printf("notice: checkpoint holds compressor state that this uncompressed run ignores\n");
  if (flags[1] > 0)
    std::printf("notice: checkpoint has no compressor state; LEP errors, DP error feedback and warm starts start "
                "fresh\n");
  if (flags[2] > 0)
    std::printf("notice: part of the checkpoint's compressor state does not fit this run's compression (other "
                "technique or rank); that part starts fresh\n");
}

void Trainer::write_trace() { write_chrome_trace(*topo_, stage_->timers().take_trace(), opt_.trace_path); }

}  // namespace occ
