#include "train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <cstdlib>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/heartbeat.h"
#include "core/numerics.h"
#include "core/timer.h"
#include "data/tokenizer.h"
#include "data/tokenizer_stamp.h"
#include "train/checkpoint.h"
#include "train/checkpoint_writer.h"
#include "train/host_fit.h"
#include "train/output_paths.h"

namespace occ {

Trainer::Trainer(TrainOptions options, int world_rank, int world_size)
    : opt_(std::move(options)), world_rank_(world_rank), world_size_(world_size) {
  layout_ = ParallelLayout::from_rank(world_rank, world_size, opt_.tensor_parallel, opt_.pipeline_parallel);
  layout_.vp_size = opt_.model_chunks();
  opt_.tokenizer.validate();
  OCC_CHECK(!(opt_.finetune || opt_.no_load_optim || opt_.no_load_rng) || !opt_.load.empty(),
            "--finetune, --no-load-optim and --no-load-rng apply to --load CHECKPOINT; pass it");
  // The checkpoint to resume (--load, --ckpt-step), chosen once: every read of it below and in load() takes this one.
  if (!opt_.load.empty()) {
    resume_iteration_ = checkpoint_to_resume(opt_.load, opt_.ckpt_step, opt_.save);
    OCC_CHECK(resume_iteration_ || !opt_.finetune,
              "--finetune --load {}: no checkpoint there to take the weights from; check the path", opt_.load);
  }
  // --finetune from a checkpoint that names its tokenizer (e.g. import-hf's): that one.
  if (opt_.finetune && !opt_.tokenizer.given() && opt_.model.vocab_size == 0)
    opt_.tokenizer = tokenizer_from_config(verify_checkpoint(opt_.load, *resume_iteration_).config);
  if (opt_.tokenizer.given()) opt_.model.vocab_size = load_tokenizer(opt_.tokenizer)->vocab_size();
  OCC_CHECK(opt_.model.vocab_size > 0,
            "--tokenizer-model (or --tokenizer-type GPT2BPETokenizer with --vocab-file and --merge-file, or "
            "--vocab-size) is required to size the vocabulary");
  opt_.resolve_device();
  opt_.resolve_train_samples();
  opt_.validate(layout_);
  require_device(opt_.device);  // this machine can run it
  check_fits_host(opt_, layout_);
  opt_.resolve_error_feedback(opt_.grad_comp);
  nonfinite_ = NonfiniteGuard(opt_.skip_nonfinite);
  exit_ = std::make_unique<ExitControl>(opt_.exit);
  checkpoint_writer_ = std::make_unique<CheckpointWriter>(opt_.async_save, opt_.debug_save_delay_s);

  data_ = std::make_unique<TrainingData>(opt_.data_spec());  // the indices: build_data_indices(), open_data()
  // The checkpoint to resume: one save's files, before anything is created or trained.
  if (resume_iteration_) verify_checkpoint(opt_.load, *resume_iteration_);
  // Where this rank will write, checked now rather than after the training it would hold.
  OutputPaths outputs;
  if (!opt_.save.empty()) outputs.checkpoint_output("--save", opt_.save, deepest_save_path());
  if (!opt_.load.empty()) outputs.checkpoint_input("--load", opt_.load);  // --save X --load X: a resume
  if (is_logger()) {
    if (!opt_.trace_path.empty()) outputs.file("--trace", opt_.trace_path);
    if (!opt_.metrics_path.empty()) outputs.file("--metrics", opt_.metrics_path);
    if (!opt_.tensorboard.dir.empty()) outputs.dir("--tensorboard-dir", opt_.tensorboard.dir);
    outputs.tokenizer_inputs(opt_.tokenizer);
    const DataSpec data = opt_.data_spec();
    for (const auto& [flag, blend] : {std::pair{"--data-path", &data.data}, {"--train-data-path", &data.train},
                                      {"--valid-data-path", &data.valid}, {"--test-data-path", &data.test}})
      for (const std::string& prefix : blend->prefixes)
        for (const std::string& file : {prefix + ".bin", prefix + ".idx", tokenizer_stamp_path(prefix)})
          outputs.input(flag, file);
  }
  outputs.check(world_rank_);
  if (is_logger() && !opt_.tensorboard.dir.empty()) tensorboard_ = std::make_unique<TensorBoardLog>(opt_.tensorboard);
  if (!opt_.debug_dump_tokens.empty() && layout_.first_stage() && layout_.tp_rank == 0)
    token_dump_ = std::make_unique<TokenDump>(opt_.debug_dump_tokens, world_rank_);
  if (is_logger() && !opt_.metrics_path.empty()) {
    metrics_ = std::fopen(opt_.metrics_path.c_str(), "a");
    OCC_CHECK(metrics_, "cannot open --metrics file {} for appending; check the path", opt_.metrics_path);
  }
  // In-place progress only on a real terminal of a single process (mpirun relays output line by line).
  tty_ = is_logger() && world_size_ == 1 && isatty(STDOUT_FILENO) && !std::getenv("OMPI_COMM_WORLD_SIZE");
}

Trainer::~Trainer() {
  if (metrics_) std::fclose(metrics_);
}

std::vector<std::string> Trainer::build_data_indices() { return data_->build_missing_indices(); }

void Trainer::open_data() { data_->open(); }

void Trainer::connect(double comm_timeout_s) {
  topo_ = Topology::create(opt_.tensor_parallel, opt_.pipeline_parallel, comm_timeout_s);
  comm_ = std::make_unique<JobComm>(opt_, *topo_, world_size_, comm_timeout_s);
  Communicator& tp = comm_->tp();
  const bool staged = comm_->staged();
  kernels::select_attention_backend(opt_.device, opt_.attention_backend);
  stage_ = std::make_unique<GptStage>(opt_.model, layout_, tp, opt_.seed,
                                      StageOptions{opt_.device, opt_.recompute(), opt_.precision(), nullptr,
                                                   opt_.debug_classifier_values, opt_.sequence_parallel,
                                                   opt_.wire_formats()});
  if (!opt_.trace_path.empty()) stage_->timers().enable_trace();
  loss_scaler_ = std::make_unique<LossScaler>(opt_.precision(), opt_.loss_scale);
  grad_sync_ = std::make_unique<GradientSync>(opt_, *topo_, stage_->param_layout(), stage_->grads(), staged,
                                               comm_->gradient_nccl(), stage_->ops(), stage_->timers());
  if (grad_sync_->sharded()) {
    shards_ = std::make_unique<OptimizerShards>(grad_sync_->shard_regions(), stage_->param_layout().total(), *topo_->dp);
    // The all-gather of the updated shards works on the parameters' host view.
    params_host_ =
        std::make_unique<HostMirror>(opt_.device, stage_->params().data(), stage_->params().size(), staged);
    if (opt_.overlap_param_gather) {
      // The model asks for each part's parameters just before it reads them.
      param_gather_ = std::make_unique<OverlappedParamGather>(*shards_, *params_host_, *topo_->dp, topo_->counters,
                                                              comm_timeout_s, opt_.wire_formats().parameters);
      stage_->set_params_ready([this](int64_t offset, int64_t numel) { wait_for_params(offset, numel); });
    }
  }
  optimizer_ = std::make_unique<AdamW>(stage_->param_layout(), opt_.adam, stage_->ops(),
                                       shards_ ? shards_->owned() : std::vector<BufferSpan>{});
  if (opt_.diloco.enabled())  // the replicas train alone; the outer steps sync them (train/diloco.h)
    diloco_ = std::make_unique<Diloco>(opt_.diloco, stage_->param_layout(), opt_.model.num_layers,
                                       std::as_const(*stage_).params(), *topo_->dp, comm_timeout_s, layout_,
                                       opt_.debug_diloco_dump);
  // Messages stay on the stage's device: NCCL's links send them from there;
  // staged, the exchange copies them through host memory for MPI after the
  // codecs (on the device) encode them.
  exchange_ = std::make_unique<PipelineExchange>(comm_->pipeline_links(), tp, topo_->counters, layout_,
                                                 stage_->timers(), opt_.device, staged, opt_.sequence_parallel,
                                                 opt_.wire_formats().activations, &stage_->ops());
  const CompressorPlacement on_stage{&stage_->ops()};
  cb_links_ = make_backprop_links(opt_.cb, layout_, int64_t(opt_.micro_batch_size) * opt_.model.seq_length,
                                  opt_.model.hidden_size, opt_.seed, on_stage);
  BackwardCompression cb{{}, {}, [cfg = opt_.cb](bool after_last_forward) {
                           return CompressedBackprop::compresses(cfg, after_last_forward);
                         }};
  for (auto& link : cb_links_.send) cb.send.push_back(link.get());
  for (auto& link : cb_links_.recv) cb.recv.push_back(link.get());
  auto act = make_activation_links(opt_.activation_comp, layout_,
                                   int64_t(opt_.micro_batch_size) * opt_.model.seq_length, opt_.model.hidden_size,
                                   opt_.seed, on_stage);
  act_send_ = std::move(act.send);
  act_recv_ = std::move(act.recv);
  executor_ = std::make_unique<PipelineExecutor>(layout_, *exchange_, stage_->timers(), std::move(cb),
                                                 ForwardCompression{act_send_.get(), act_recv_.get()});
}

void Trainer::read_micro_batch(const SampleSource& data, int64_t first_sample, int slot) {
  // Only the first stage needs inputs and only the last needs labels.
  if (layout_.first_stage() || layout_.last_stage()) tokens_.read(data, first_sample, opt_.micro_batch_size, size_t(slot));
}

MicroBatch Trainer::micro_batch(int slot, int64_t sample_base, float grad_scale) const {
  return MicroBatch{tokens_.inputs(size_t(slot)), tokens_.labels(size_t(slot)), opt_.micro_batch_size,
                    opt_.model.seq_length, sample_base, iteration_, grad_scale};
}

// One iteration of 1F1B (plain or interleaved) on this rank: the executor
// walks the schedule and moves the messages; these steps are the model's part of it.
void Trainer::run_schedule(int M) {
  const int mbs = opt_.micro_batch_size, T = opt_.model.seq_length;
  const int pool = executor_->slots(M);
  while (acts_.size() < size_t(pool)) acts_.push_back(stage_->make_activations());
  tokens_.resize(size_t(pool));
  // d(loss)/d(token loss), times --fp16's loss scale (1 otherwise), which
  // train_step divides back out of the gradients.
  const float grad_scale = 1.0f / float(int64_t(mbs) * T * M) * loss_scaler_->scale();
  // Megatron sampler order: micro-batch j of DP rank d holds global-batch
  // samples [j*mbs*DP + d*mbs, +mbs).
  auto base = [&](int j) { return int64_t(j) * mbs * layout_.dp_size + int64_t(layout_.dp_rank) * mbs; };
  const std::function<void(int64_t)> on_final = [this](int64_t offset) { grad_sync_->grads_final_from(offset); };
  MicroBatchSteps steps;
  // Tokens are read where the chunk has the embedding (inputs) or the head (labels).
  steps.load = [&](int j, int slot, int chunk) {
    if (layout_.holds_embedding(chunk) || layout_.holds_head(chunk))
      read_micro_batch(data_->train(), consumed_samples_ + base(j), slot);
    if (token_dump_ && layout_.holds_embedding(chunk))
      token_dump_->record(iteration_ + 1, data_->train(), consumed_samples_ + base(j), mbs);
  };
  // On a GPU the steps only queue their kernels: no host synchronisation
  // between micro-batches. With --trace they wait for them, so that the
  // timeline's compute extents are true.
  const bool wait = !opt_.trace_path.empty();
  steps.forward = [&](int j, int slot, int chunk, const float* x, float* y) {
    stage_->forward(acts_[size_t(slot)], micro_batch(slot, base(j), grad_scale), x, y, true, chunk);
    if (wait) stage_->ops().synchronize();
  };
  steps.backward = [&](int j, int slot, int chunk, const float* dy, float* dx, bool last) {
    MicroBatch mb = micro_batch(slot, base(j), grad_scale);
    mb.last_backward = last;
    stage_->backward(acts_[size_t(slot)], mb, dy, dx, last ? on_final : nullptr, chunk);
    if (wait) stage_->ops().synchronize();
  };
  // LEP's probe watches the link of the model's last chunk (the paper's last stage).
  if (opt_.check_lep && layout_.last_stage())
    steps.before_compressed_send = [&](int, int slot, int chunk, const float* dx) {
      if (layout_.holds_head(chunk)) check_lep(slot, chunk, dx);
    };
  executor_->run(M, size_t(mbs) * T * size_t(opt_.model.hidden_size), steps);
}

IterationStats Trainer::train_step() {
  const double start = now_seconds(), cpu_start = process_cpu_seconds();
  PhaseTimers& timers = stage_->timers();
  timers.reset();
  topo_->counters.reset();
  const int T = opt_.model.seq_length;
  const int64_t M = opt_.num_micro_batches(layout_.dp_size);
  heartbeat::begin_iteration(iteration_ + 1);
  stage_->zero_grads();
  if (opt_.debug_inject_nan == iteration_ + 1 && layout_.last_stage() && layout_.tp_rank == 0 &&
      layout_.dp_rank == 0) {
    // Test only: a NaN in this stage's first parameter gradient on one replica, where an
    // overflow in its backward would leave it: the backward accumulates into it and the
    // data-parallel reduction carries it to every replica, as it would a real one.
    stage_->ops().fill(stage_->grads().data(), std::nanf(""), 1);
  }
  grad_sync_->begin_iteration(iteration_);
  exchange_->begin_iteration(iteration_);  // keys the pipeline codecs' stochastic rounding
  run_schedule(int(M));
  heartbeat::phase("gradient sync");
  grad_sync_->finish();
  const ParamLayout& pl = stage_->param_layout();
  auto& grads = stage_->grads();
  IterationStats s;
  s.iteration = iteration_ + 1;
  const float loss_scale = loss_scaler_->scale();
  if (loss_scale != 1.0f) {
    // Unscale (a power of two: exact) before the norm, clipping and the update.
    ScopedPhase t(timers, "optimizer");
    stage_->ops().scale(grads.data(), 1.0f / loss_scale, int64_t(grads.size()));
  }
  {
    // Its own phase: stages that finished early wait here for the slowest one.
    ScopedPhase t(timers, "norm_allreduce");
    heartbeat::phase("gradient norm");
    // Sharded, each rank's owned gradients are the averaged ones: sum them over every rank.
    double sq = local_grad_sq_norm(stage_->ops(), pl, grads.data(), shards_ ? &shards_->owned() : nullptr);
    (shards_ ? topo_->world : topo_->model)->allreduce_sum(&sq, 1, Traffic::Other);
    s.grad_norm = std::sqrt(sq);
  }
  // Loss of the global batch: the last stage's sums (one TP rank each), over DP.
  // Read after the norm, whose reduction already waited for the device.
  const double loss_sum = stage_->take_loss_sum();
  double loss = layout_.last_stage() && layout_.tp_rank == 0 ? loss_sum : 0.0;
  topo_->world->allreduce_sum(&loss, 1, Traffic::Other);
  s.loss = loss / double(int64_t(opt_.global_batch_size) * T);
  // The norm and the loss are summed over every rank, so all agree on an overflow.
  bool skip = loss_scaler_->active() && loss_scaler_->update(std::isfinite(s.grad_norm));
  if (!loss_scaler_->active())
    skip = nonfinite_.check(*topo_->world, layout_, stage_->ops(), pl, grads.data(), s.iteration, s.loss, s.grad_norm);
  s.skipped_nonfinite = nonfinite_.skipped();
  s.lr = opt_.lr_schedule().at(s.iteration);
  // The forwards have waited for every region; this only collects the trace.
  wait_for_params();
  if (!skip) {
    ScopedPhase t(timers, "optimizer");
    heartbeat::phase("optimizer");
    clip_grads(stage_->ops(), grads.data(), int64_t(grads.size()), s.grad_norm, opt_.clip_grad);
    optimizer_->update(stage_->params().data(), grads.data(), s.lr, s.iteration);
  }
  if (!skip && param_gather_ && s.iteration < opt_.train_iters) {
    // Beside the next iteration's forward, which waits region by region
    // (wait_for_params). The last iteration has no forward to hide it behind.
    param_gather_->start();
    stage_->params();  // the reduced-precision copy is stale: refreshed range by range after each wait
  } else if (!skip && shards_) {
    ScopedPhase t(timers, "dp_allgather");  // every rank's updated shard to all
    params_host_->download_all();
    shards_->allgather(params_host_->host(), Traffic::DataParallel, opt_.wire_formats().parameters);
    params_host_->upload_all();
    stage_->params();  // the reduced-precision copy of the weights is stale
  }
  if (diloco_) diloco_->after_inner_step(iteration_ + 1, stage_->params(), timers, topo_->counters);
  if (loss_scaler_->active()) {
    s.loss_scale = loss_scale;
    s.skipped_iters = loss_scaler_->skipped();
  }
  iteration_ += 1;
  consumed_samples_ += opt_.global_batch_size;
  heartbeat::end_iteration(iteration_);
  s.ms = (now_seconds() - start) * 1e3;
  timers.add("cpu", process_cpu_seconds() - cpu_start);
  timers.add("iteration", s.ms / 1e3);
  s.tokens_per_s = double(opt_.global_batch_size) * T / (s.ms / 1e3);
  return s;
}

// --check-lep (last stage): this TP rank's slices, as the exchange sends them,
// of the input activations and of the gradient the LEP residual joins.
void Trainer::check_lep(int slot, int chunk, const float* grad) {
  // The residual, the input and the gradient are on the stage's device: the probe reads host copies.
  const DeviceBuffer<float>& residual = *cb_links_.send[size_t(chunk)]->residual();
  const size_t n = residual.size(), off = n * size_t(layout_.tp_rank);
  const StageActivations& a = acts_[size_t(slot)];
  const ConstTensorRef x = a.layers.empty() ? a.output.ref() : a.layers[0].input.ref();
  // Sequence parallel, the stage keeps only its slice of the input.
  lep_input_ = TensorBuffer::values_to_host(x + int64_t(opt_.sequence_parallel ? 0 : off), n, opt_.device);
  lep_grad_.resize(n);
  device_copy(lep_grad_.data(), Device::Cpu, grad + off, opt_.device, n * sizeof(float));
  lep_probe_.observe(residual.to_host(), lep_input_.data(), lep_grad_.data(), stage_->timers());
}

void Trainer::wait_for_params(int64_t offset, int64_t numel) {
  if (!param_gather_) return;
  PhaseTimers& timers = stage_->timers();
  const double start = now_seconds();
  const double waited = numel < 0 ? param_gather_->wait_all() : param_gather_->wait(offset, numel);
  if (waited > 0) {
    timers.add("dp_allgather", waited);
    timers.add_event("dp_allgather wait", start, start + waited);
  }
  if (!param_gather_->in_flight())
    for (auto& e : param_gather_->take_events()) timers.add_event(e.name, e.start, e.end, e.thread);
}

double Trainer::evaluate(const SampleSource& data, const char* set, int64_t first_sample) {
  wait_for_params();  // the whole parameters, not only the layers forward asks for
  const int mbs = opt_.micro_batch_size, T = opt_.model.seq_length;
  const size_t NC = size_t(mbs) * T * size_t(opt_.model.hidden_size);
  const int64_t total = opt_.eval_iters * opt_.global_batch_size;
  const int64_t per_step = int64_t(mbs) * layout_.dp_size;
  tokens_.resize(std::max<size_t>(tokens_.slots(), 1));
  DeviceBuffer<float> x_in(opt_.device, NC), out(opt_.device, NC);
  StageActivations acts = stage_->make_activations();
  OCC_CHECK(first_sample >= 0 && first_sample + total <= data.size(),
            "internal: evaluation of samples [{}, {}) of a set of {}", first_sample, first_sample + total, data.size());
  // Activations travel compressed as in training (--activation-comp-method): the
  // validation loss is the one of the pipeline as it runs. Their rounding is keyed
  // by the iteration evaluated at, so a resumed run's evaluations round alike.
  exchange_->begin_iteration(iteration_);
  // Interleaved, each micro-batch goes round the ring of ranks once per chunk.
  for (int64_t j = 0; j * per_step < total; ++j) {
    const int64_t base = first_sample + j * per_step + int64_t(layout_.dp_rank) * mbs;
    heartbeat::phase("evaluation", int(j));
    read_micro_batch(data, base, 0);
    if (token_dump_) token_dump_->record_eval(iteration_, set, data, base, mbs);
    for (int chunk = 0; chunk < layout_.vp_size; ++chunk) {
      if (!layout_.holds_embedding(chunk)) exchange_->recv_forward(x_in.data(), NC, int(j), chunk, act_recv_.get());
      stage_->forward(acts, micro_batch(0, base, 0.0f), x_in.data(), out.data(), false, chunk);
      if (!layout_.holds_head(chunk)) {
        exchange_->send_forward(out.data(), NC, int(j), chunk, act_send_.get());
        exchange_->wait_sends();  // `out` is reused by the next chunk or micro-batch
      }
    }
  }
  const double loss_sum = stage_->take_loss_sum();
  double loss = layout_.last_stage() && layout_.tp_rank == 0 ? loss_sum : 0.0;
  topo_->world->allreduce_sum(&loss, 1, Traffic::Other);
  return loss / double(total * T);
}

void Trainer::log_iteration(const IterationStats& s) {
  const nlohmann::json ranks = gather_rank_metrics(*topo_, stage_->timers());
  if (!is_logger()) return;
  nlohmann::json j = iteration_row(s, consumed_samples_);
  summarize_rank_metrics(ranks, j);
  if (const std::string warning = straggler_.observe(ranks, j); !warning.empty()) std::printf("%s\n", warning.c_str());
  j["wire"] = wire_json(opt_.wire_formats(), shards_ != nullptr);
  traffic_.add(j);
  if (metrics_) {
    std::fprintf(metrics_, "%s\n", j.dump().c_str());
    std::fflush(metrics_);
  }
  const bool show = s.iteration % opt_.log_interval == 0 || s.iteration == opt_.train_iters || s.val_loss;
  if (tensorboard_) {
    tensorboard_->add_row(j);
    if (show) tensorboard_->flush();  // a killed run keeps its curves up to here
  }
  if (!show) return;
  const double elapsed = now_seconds() - run_start_;
  const double per_iter = elapsed / double(s.iteration - first_iteration_);
  const std::string line = progress_line(s, opt_.train_iters, per_iter * double(opt_.train_iters - s.iteration));
  if (tty_ && !s.val_loss && s.iteration != opt_.train_iters) {
    std::printf("\r%s\033[K", line.c_str());
  } else {
    std::printf("%s%s\n", tty_ ? "\r\033[K" : "", line.c_str());
  }
  if (s.val_loss)
    std::printf("validation loss at iter %lld: %.4f (ppl %.2f)\n", (long long)s.iteration, *s.val_loss,
                std::exp(*s.val_loss));
  if (s.test_loss)
    std::printf("test loss at iter %lld: %.4f (ppl %.2f)\n", (long long)s.iteration, *s.test_loss,
                std::exp(*s.test_loss));
  std::fflush(stdout);
}

void Trainer::run() {
  if (is_logger())
    std::printf("device: %s; precision: %s; recompute: %s; numerics %d\nattention: %s\nmatrix products: %s\n",
                describe_device(opt_.device).c_str(), precision_name(opt_.precision()),
                recompute_name(opt_.recompute()), kNumericsVersion,
                stage_->ops().attention_description(opt_.precision()).c_str(),
                stage_->ops().gemm_description(opt_.precision()).c_str());
  if (is_logger())
    std::printf("model: %lld parameters (%d layers, hidden %d, %d heads, seq %d, vocab %d padded to %d); "
                "TP %d x PP %d x DP %d; %lld micro-batches of %d per iteration\n",
                (long long)opt_.model.num_parameters(), opt_.model.num_layers, opt_.model.hidden_size,
                opt_.model.num_attention_heads, opt_.model.seq_length, opt_.model.vocab_size,
                opt_.model.padded_vocab_size(), layout_.tp_size, layout_.pp_size, layout_.dp_size,
                (long long)opt_.num_micro_batches(layout_.dp_size), opt_.micro_batch_size);
  if (is_logger()) std::printf("architecture: %s\n", opt_.model.describe_architecture().c_str());
  if (is_logger() && !comm_->line().empty()) std::printf("%s\n", comm_->line().c_str());
  if (is_logger() && !comm_->modules_line().empty()) std::printf("%s\n", comm_->modules_line().c_str());
  if (is_logger() && diloco_) std::printf("data parallel: %s\n", opt_.diloco.describe().c_str());
  // A round longer than the run: the replicas never synchronise (said, not refused:
  // a short run of a long-round setting is a fair smoke test).
  if (is_logger() && diloco_ && opt_.diloco.inner_steps > opt_.train_iters)
    std::printf("warning: --diloco-inner-steps %d exceeds --train-iters %lld: the %d replicas never synchronise in "
                "this run (the first outer step comes after %d inner steps); they train as independent models\n",
                opt_.diloco.inner_steps, (long long)opt_.train_iters, layout_.dp_size, opt_.diloco.inner_steps);
  if (is_logger() && layout_.vp_size > 1)
    std::printf("schedule: interleaved 1F1B, %d model chunks of %d layers per pipeline stage (virtual stage c x %d + "
                "s on stage s)\n",
                layout_.vp_size, opt_.layers_per_virtual_stage, layout_.pp_size);
  if (is_logger()) std::printf("%s\n", data_->describe().c_str());
  if (is_logger())
    for (const std::string& note : data_->notes()) std::printf("notice: %s\n", note.c_str());
  if (is_logger() && tensorboard_) std::printf("tensorboard: %s\n", tensorboard_->path().c_str());
  heartbeat::training_started(iteration_);  // (the iteration loaded: where the supervisor counts from)
  // The validation stream continues from evaluation to evaluation as Megatron's:
  // each evaluation at a multiple of --eval-interval reads the next eval_iters
  // global batches. The evaluation at start and the one after a last iteration
  // off the interval (Megatron's end-of-training evaluation, which follows its
  // last save) read the next ones without moving on. --eval-fixed-set never moves on.
  const int64_t valid_chunk = opt_.eval_iters * opt_.global_batch_size;
  if (data_->valid() && iteration_ == 0) {
    const double v = evaluate(*data_->valid(), "valid", consumed_valid_samples_);
    if (is_logger()) std::printf("validation loss at start: %.4f\n", v);
  }
  run_start_ = now_seconds();
  first_iteration_ = iteration_;
  while (iteration_ < opt_.train_iters) {
    IterationStats s = train_step();
    const bool last = iteration_ == opt_.train_iters;
    const bool on_interval = opt_.eval_interval > 0 && iteration_ % opt_.eval_interval == 0;
    if (data_->valid() && (on_interval || last)) {
      s.val_loss = evaluate(*data_->valid(), "valid", consumed_valid_samples_);
      if (on_interval && !opt_.eval_fixed_set) consumed_valid_samples_ += valid_chunk;
    }
    if (data_->test() && last) s.test_loss = evaluate(*data_->test(), "test", 0);  // Megatron's test after the last iteration
    log_iteration(s);
    finish_save(false);  // a background save every rank has written is committed now
    const bool saved = !opt_.save.empty() && ((opt_.save_interval > 0 && iteration_ % opt_.save_interval == 0) || last);
    if (saved) save_checkpoint();
    if (last) break;
    heartbeat::phase("stop check");
    if (const std::string reason = exit_->stop_reason(*topo_->world, iteration_, now_seconds() - run_start_);
        !reason.empty()) {
      if (!opt_.save.empty() && !saved) save_checkpoint();
      finish_save(true);
      if (is_logger())
        std::printf("exiting after iteration %lld of %lld: %s; %s\n", (long long)iteration_,
                    (long long)opt_.train_iters, reason.c_str(),
                    opt_.save.empty() ? "no --save, so nothing was saved"
                                      : fmt::format("checkpoint in {}; rerun the same command with --load {} to continue",
                                                    opt_.save, opt_.save).c_str());
      break;
    }
  }
  finish_save(true);   // an exit waits for the save in flight
  wait_for_params();  // nothing in flight when the run ends
  if (!opt_.trace_path.empty()) write_chrome_trace(*topo_, stage_->timers().take_trace(), opt_.trace_path);
  if (is_logger() && world_size_ > 1) traffic_.print(iteration_ - first_iteration_);
}

}  // namespace occ
