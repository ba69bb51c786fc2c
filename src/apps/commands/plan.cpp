// `optimus-cc plan`: predicts the iteration time of a model, layout, cluster
// and compression plan by simulating the 1F1B schedule (plain or interleaved) as a dependency graph
// (plan/schedule_sim.h), optionally calibrated on a real run's metrics, and
// with --auto chooses the compression plan (plan/auto_plan.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "apps/commands/commands.h"
#include "apps/commands/plan_objective.h"
#include "apps/commands/train_flags.h"
#include "data/tokenizer.h"
#include "plan/auto_plan.h"
#include "plan/calibrate.h"
#include "plan/schedule_sim.h"
#include "core/tensor_file.h"
#include "train/output_paths.h"

namespace occ::cmd {

namespace {

using namespace occ::plan;

void print_prediction(const PlanConfig& cfg, const CostModel& model, const SimResult& r, bool show_path) {
  std::printf("compression: %s\n", compression_summary(cfg).c_str());
  const double mean = mean_iteration_seconds(model, r.iteration);
  std::printf("predicted iteration: %.3f ms (%.0f tokens/s, %.1f %% of peak FLOP/s)\n", mean * 1e3,
              double(cfg.global_batch_size) * cfg.model.seq_length / mean,
              100.0 * iteration_flops(cfg) / mean / (cfg.cluster.device_flops * cfg.tp * cfg.pp * cfg.dp));
  if (model.diloco.on) {
    // The breakdown below is of one inner step; the outer syncs come once per round.
    std::printf("diloco: inner iteration %.3f ms; outer syncs add %.3f ms per round of %d inner steps (%.3f ms per "
                "iteration); per sync and stage (fragment: elements, bytes per rank, link ms, main-thread ms):",
                r.iteration * 1e3, model.diloco.per_round(r.iteration) * 1e3, model.diloco.inner_steps,
                model.diloco.amortized(r.iteration) * 1e3);
    for (size_t s = 0; s < model.diloco.stages.size(); ++s) {
      std::printf("%s stage %zu:", s ? ";" : "", s);
      for (size_t f = 0; f < model.diloco.stages[s].size(); ++f) {
        const DilocoFragmentCost& c = model.diloco.stages[s][f];
        std::printf(" f%zu %.4g, %.4g B, %.3f, %.3f", f, c.elements, c.bytes, c.link_seconds * 1e3, c.main_seconds * 1e3);
      }
    }
    std::printf("\ndiloco memory: outer parameters and momentum %.3f GiB per rank (host)\n",
                model.facts.empty() ? 0.0 : model.facts.front().outer_state_bytes / double(1 << 30));
  }
  std::printf("critical path (ms):");
  for (Category c : all_categories())
    if (r.critical.at(c) > 0) std::printf(" %s %.3f", category_name(c), r.critical.at(c) * 1e3);
  std::printf("\nbusy per stage, mean (ms):");
  for (Category c : all_categories())
    if (r.busy_per_stage.at(c) > 0) std::printf(" %s %.3f", category_name(c), r.busy_per_stage.at(c) * 1e3);
  std::printf("\nper stage: stage | forward ms/mb | backward ms/mb | DP bytes/rank | DP exposed ms | ready ms | "
              "weights+grads+Adam GiB/rank | micro-batches in flight | activations GiB/rank\n");
  for (int s = 0; s < cfg.pp; ++s) {
    const auto& st = model.input.stages[size_t(s)];
    double exposed = 0;
    for (const SimNode& n : r.nodes)
      if (n.stage == s && n.name.find("dp wait") != std::string::npos) {
        // The main thread's wait for the reducer: how far the DP all-reduce outlasted the schedule.
        double sched_end = n.start;
        for (const SimNode& m : r.nodes)
          if (m.stage == s && m.name.find("wait sends") != std::string::npos) sched_end = m.end;
        exposed = n.end - sched_end;
      }
    const StageFacts& f = model.facts[size_t(s)];
    std::printf("  %d | %.3f | %.3f | %.4g | %.3f | %.3f | %.2f | %d | %.3f\n", s, st.forward * 1e3, st.backward * 1e3,
                f.dp_bytes, exposed * 1e3, r.stage_ready[size_t(s)] * 1e3, f.model_state_bytes / double(1 << 30),
                f.in_flight, f.activation_bytes / double(1 << 30));
  }
  std::printf("messages per TP rank: activation %.4g B, compressed gradient %.4g B; embedding gradient %.4g B\n",
              model.pp_message_bytes, model.pp_compressed_bytes, model.embedding_bytes);
  if (!show_path) return;
  std::printf("critical path, %zu nodes (start ms, end ms, name):\n", r.critical_path.size());
  for (int id : r.critical_path) {
    const SimNode& n = r.nodes[size_t(id)];
    std::printf("  %10.3f %10.3f  %s\n", n.start * 1e3, n.end * 1e3, n.name.c_str());
  }
}

// The plan's bytes per value from a run's flags (TrainOptions::wire_formats):
// activations and parameters, and gradients, each unless given explicitly (an
// explicit --bytes-per-value alone also sets the gradients', as it always did).
void set_wire_bytes(PlanConfig& cfg, const TrainOptions& run, bool bytes_given, bool grad_bytes_given) {
  if (bytes_given) return;  // a model of another engine's wire (e.g. Megatron's fp16): all values alike
  const WireFormats w = run.wire_formats();
  cfg.bytes_per_value = int(wire_value_bytes(w.activations));
  cfg.tp_sum_bytes_per_value = int(wire_value_bytes(w.activation_sums));
  if (!grad_bytes_given) cfg.grad_bytes_per_value = int(wire_value_bytes(w.gradients));
  cfg.factor_bytes_per_value = 4;  // our codecs' PowerSGD factors are fp32 words
}

}  // namespace

int plan(int argc, char** argv) {
  CLI::App app{"Predict the iteration time of a model, layout, cluster and compression plan by simulating the 1F1B "
               "schedule with its transfers and collectives; calibrate on a run's metrics; choose the compression "
               "plan automatically. Takes every train flag (model, layout, compression; data flags are ignored).",
               "plan"};
  TrainOptions opt;
  opt.model.num_layers = 52, opt.model.hidden_size = 1920, opt.model.num_attention_heads = 24;
  opt.model.seq_length = opt.model.max_position_embeddings = 1024;
  opt.model.vocab_size = 50257;
  opt.micro_batch_size = 8, opt.global_batch_size = 512;
  opt.tensor_parallel = 8, opt.pipeline_parallel = 4;
  add_train_flags(app, opt);
  app.add_option("--vocab-size", opt.model.vocab_size, "vocabulary (padded like train)")->capture_default_str();
  PlanConfig cfg;
  ClusterSpec& cl = cfg.cluster;
  cl.nodes = 16, cl.devices_per_node = 8;
  double tflops = 312, mem_gbs = 1555, intra_gbs = 230, inter_gbs = 25, intra_us = 5, inter_us = 5;
  app.add_option("--nodes", cl.nodes, "nodes")->capture_default_str();
  auto* dpn = app.add_option("--devices-per-node", cl.devices_per_node, "devices (ranks) per node")->capture_default_str();
  app.add_option("--device-tflops", tflops, "peak TFLOP/s of one device (A100 FP16 tensor core: 312)")
      ->capture_default_str();
  app.add_option("--efficiency", cl.efficiency, "achieved fraction of peak in the model's compute")->capture_default_str();
  app.add_option("--memory-bandwidth", mem_gbs, "device memory GB/s (optimizer, memory-bound kernels)")
      ->capture_default_str();
  app.add_option("--compress-efficiency", cl.compress_efficiency,
                 "PowerSGD kernels' FLOP/s as a fraction of the model's achieved FLOP/s")->capture_default_str();
  auto* intra_bw = app.add_option("--intra-node-bandwidth", intra_gbs, "GB/s per device inside a node")
                       ->capture_default_str();
  auto* intra_lat = app.add_option("--intra-node-latency", intra_us, "microseconds per message inside a node")
                        ->capture_default_str();
  auto* inter_bw = app.add_option("--inter-node-bandwidth", inter_gbs,
                                  "GB/s per node between nodes (200 Gb/s InfiniBand = 25)")->capture_default_str();
  auto* inter_lat = app.add_option("--inter-node-latency", inter_us, "microseconds per message between nodes")
                        ->capture_default_str();
  double inter_message_us = -1;
  auto* inter_msg_lat = app.add_option("--inter-node-message-latency", inter_message_us,
                                       "microseconds per message sent by the main thread between nodes (pipeline "
                                       "sends, scalar all-reduces; default: --inter-node-latency, or calibrated)");
  auto* bpv_flag = app.add_option("--bytes-per-value", cfg.bytes_per_value,
                                  "bytes per activation / parameter value on the wire (default: the run's, 2 with "
                                  "--bf16 / --fp16, else 4)");
  auto* gbv_flag = app.add_option("--grad-bytes-per-value", cfg.grad_bytes_per_value,
                                  "bytes per gradient value on the DP wire (default: --bytes-per-value where that is "
                                  "given, else the run's: 4, or 2 with --grad-reduce-in-bf16)");
  app.add_flag("--checkpoint-activations", cfg.recompute_activations, "backward recomputes the forward");
  app.add_flag("--blocking-p2p", cfg.blocking_sends, "model Megatron's blocking pipeline sends instead of our nonblocking ones");
  app.add_flag("--no-comm", cl.free_comm, "every transfer and collective is free (the compute-only bound)");
  std::string calibrate_path, json_path, run_flags;
  int skip = -1;
  app.add_option("--calibrate", calibrate_path, "fit compute and link from this metrics JSONL (train --metrics)");
  app.add_option("--calibrated-run-flags", run_flags,
                 "the train flags of the calibration run, if its compression differs from the plan's (one string)");
  app.add_option("--calibrate-skip", skip, "skip rows with iter <= N (default 1: each run's first iteration)");
  bool auto_mode = false, show_path = false, ignore_unknown = false;
  AutoLimits lim;
  app.add_flag("--auto", auto_mode, "choose the compression plan with the lowest predicted iteration time");
  app.add_option("--max-compressed-fraction", lim.max_compressed_fraction,
                 "--auto: at most this fraction of DP gradient elements PowerSGD-compressed")->capture_default_str();
  app.add_option("--min-inter-grad-comp-rank", lim.min_cb_rank, "--auto: lowest CB rank allowed")->capture_default_str();
  app.add_option("--min-grad-comp-rank", lim.min_dp_rank, "--auto: lowest DP PowerSGD rank allowed")
      ->capture_default_str();
  app.add_option("--tolerance", lim.tolerance,
                 "--auto: plans within this relative time of the fastest count as equal; the least compressing wins")
      ->capture_default_str();
  std::string loss_costs_path = "docs/results/compressors.json", diloco_costs_path = "docs/results/diloco-quality.json";
  app.add_option("--max-loss-increase", lim.max_loss_increase,
                 "--auto, quality-aware: the largest expected final-validation-loss increase allowed, in % of the "
                 "baseline's, as measured by the compressor sweep (--compressors-json); candidates are the methods "
                 "it measured on each link class");
  app.add_option("--compressors-json", loss_costs_path,
                 "--max-loss-increase: the sweep's measured loss costs (python3 -m occtools compressors)")
      ->capture_default_str();
  app.add_option("--diloco-json", diloco_costs_path,
                 "--max-loss-increase: DiLoCo's measured loss costs (python3 -m occtools diloco-quality); where the file "
                 "exists, DiLoCo settings are candidates for the dp link")
      ->capture_default_str();
  ObjectiveFlags objective_flags;
  add_objective_flags(app, objective_flags);
  app.add_flag("--critical-path", show_path, "print every node of the critical path");
  app.add_option("--json", json_path, "also write the prediction as JSON");
  app.add_flag("--ignore-unknown-flags", ignore_unknown, "accept (and ignore) flags plan does not know");
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--ignore-unknown-flags") app.allow_extras();
  if (int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;
  refuse_inapplicable_flags(app, opt);
  if (!json_path.empty()) {  // checked now, not after the plan is made
    OutputPaths outputs;
    outputs.file("--json", json_path);
    for (const auto& [flag, path] : {std::pair{"--calibrate", calibrate_path}, std::pair{"--compressors-json", loss_costs_path},
                                     std::pair{"--diloco-json", diloco_costs_path},
                                     std::pair{"--time-to-target-json", time_to_target_path(objective_flags, loss_costs_path)}})
      if (!path.empty()) outputs.input(flag, path);
    outputs.tokenizer_inputs(opt.tokenizer);
    outputs.check();
  }
  if (!app.remaining().empty())
    std::printf("ignored flags: %zu arguments plan does not know (first: %s)\n", app.remaining().size(),
                app.remaining().front().c_str());

  // A plan is of GPUs (A100 by default), whatever this machine has.
  opt.device = opt.device_name.empty() ? Device::Cuda : parse_device(opt.device_name);
  // Like train: the vocabulary is the tokenizer's when one is given.
  if (opt.tokenizer.given() && !app.count("--vocab-size"))
    opt.model.vocab_size = load_tokenizer(opt.tokenizer)->vocab_size();
  cfg.model = opt.model;
  if (cfg.model.max_position_embeddings < cfg.model.seq_length) cfg.model.max_position_embeddings = cfg.model.seq_length;
  cfg.micro_batch_size = opt.micro_batch_size, cfg.global_batch_size = opt.global_batch_size;
  cfg.tp = opt.tensor_parallel, cfg.pp = opt.pipeline_parallel;
  cfg.layers_per_virtual_stage = opt.layers_per_virtual_stage;
  cfg.use_distributed_optimizer = opt.use_distributed_optimizer;
  cfg.overlap_param_gather = opt.overlap_param_gather;
  // train's --sequence-parallel (add_train_flags): the plan models the engine's sequence parallelism.
  cfg.sequence_parallel = opt.sequence_parallel;
  if (opt.recompute() == Recompute::Full) cfg.recompute_activations = true;
  cfg.selective_recompute = opt.recompute() == Recompute::Selective;
  cfg.cb = opt.cb;
  cfg.grad_comp = opt.grad_comp;
  cfg.activation_comp = opt.activation_comp;
  opt.resolve_error_feedback(cfg.grad_comp);
  cfg.emb_comm_opt = opt.emb_comm_opt;
  cfg.diloco = opt.diloco;
  cfg.dp_bucket_elems = opt.dp_bucket_elems;
  // Bytes per value from the run's flags, as train sends them (core/wire_format.h), unless given.
  set_wire_bytes(cfg, opt, bpv_flag->count() > 0, gbv_flag->count() > 0);
  cl.device_flops = tflops * 1e12, cl.memory_bandwidth = mem_gbs * 1e9;
  cl.intra = {intra_gbs * 1e9, intra_us * 1e-6};
  cl.inter = {inter_gbs * 1e9, inter_us * 1e-6};
  if (inter_msg_lat->count()) {
    if (!std::isfinite(inter_message_us) || inter_message_us < 0)
      throw UsageError(fmt::format("--inter-node-message-latency must be a finite number >= 0 (got {:g})", inter_message_us));
    cl.inter.p2p_latency = inter_message_us * 1e-6;
  }

  std::unique_ptr<Calibration> cal;
  if (!calibrate_path.empty()) {
    // The run's layout decides T, P, D; by default one TP group per node.
    int T, P, D;
    metrics_layout(calibrate_path, T, P, D);
    if (app.count("--tensor-model-parallel-size") && T != cfg.tp)
      throw UsageError(fmt::format("--tensor-model-parallel-size {} disagrees with the calibration run's {}; drop the "
                                   "flag or use matching metrics", cfg.tp, T));
    if (app.count("--pipeline-model-parallel-size") && P != cfg.pp)
      throw UsageError(fmt::format("--pipeline-model-parallel-size {} disagrees with the calibration run's {}; drop "
                                   "the flag or use matching metrics", cfg.pp, P));
    cfg.tp = T, cfg.pp = P;
    if (!dpn->count()) cl.devices_per_node = T;
    cl.nodes = T * P * D / cl.devices_per_node;
    if (cl.nodes * cl.devices_per_node != T * P * D)
      throw UsageError(fmt::format("--devices-per-node {} does not divide the calibration run's {} ranks",
                                   cl.devices_per_node, T * P * D));
    cfg.dp = D;
    PlanConfig run = cfg;  // the calibration run's own compression settings
    if (!run_flags.empty()) {
      CLI::App parse_run{"calibration run flags", "plan"};
      TrainOptions o = opt;  // model and batch as the plan's unless the string says otherwise
      o.cb = {}, o.grad_comp = {}, o.activation_comp = {}, o.emb_comm_opt = false;
      add_train_flags(parse_run, o);
      parse_run.add_option("--vocab-size", o.model.vocab_size);
      parse_run.allow_extras();
      try {
        parse_run.parse(run_flags, false);
      } catch (const CLI::ParseError& e) {
        throw UsageError(fmt::format("--calibrated-run-flags: {}; give the run's train flags as one string", e.what()));
      }
      run.cb = o.cb, run.grad_comp = o.grad_comp, run.emb_comm_opt = o.emb_comm_opt;
      run.activation_comp = o.activation_comp;
      set_wire_bytes(run, o, bpv_flag->count() > 0, gbv_flag->count() > 0);
      o.resolve_error_feedback(run.grad_comp);
    }
    cal = std::make_unique<Calibration>(
        calibrate(calibrate_path, run, inter_bw->count() || inter_lat->count(), intra_bw->count() || intra_lat->count(),
                  skip));
    cl.inter = cal->inter, cl.intra = cal->intra;
    if (inter_msg_lat->count()) cl.inter.p2p_latency = inter_message_us * 1e-6;
    for (const auto& line : cal->report) std::printf("%s\n", line.c_str());
  } else {
    validate_cluster(cl);  // --nodes and --devices-per-node named before they are used
    OCC_CHECK(cfg.tp >= 1 && cfg.pp >= 1, "layout sizes must be >= 1; check --tensor-model-parallel-size and "
                                          "--pipeline-model-parallel-size");
    const int world = cl.nodes * cl.devices_per_node;
    if (world % (cfg.tp * cfg.pp) != 0)
      throw UsageError(fmt::format("{} nodes x {} devices = {} ranks is not divisible by tensor {} x pipeline {}; "
                                   "change --nodes or the layout", cl.nodes, cl.devices_per_node, world, cfg.tp, cfg.pp));
    cfg.dp = world / (cfg.tp * cfg.pp);
  }
  // The job's flags by train's own validation (TrainOptions::validate), then the plan's.
  {
    ParallelLayout layout;
    layout.tp_size = cfg.tp, layout.pp_size = cfg.pp, layout.dp_size = cfg.dp, layout.vp_size = opt.model_chunks();
    try {
      opt.validate(layout);
    } catch (const UsageError&) {
      throw;
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
  }
  cfg.validate();
  // Before any output: a bad objective, file or regime is the only line.
  const ObjectiveChoice objective = resolve_objective(app, objective_flags, auto_mode, app.count("--max-loss-increase") > 0,
                                                      loss_costs_path, opt, cfg);
  const Measured* measured = cal ? &cal->measured : nullptr;

  std::printf("model: %d layers, hidden %d, %d heads, seq %d, vocab %d; micro-batch %d, global batch %d (%d "
              "micro-batches per DP rank)\n",
              cfg.model.num_layers, cfg.model.hidden_size, cfg.model.num_attention_heads, cfg.model.seq_length,
              cfg.model.padded_vocab_size(), cfg.micro_batch_size, cfg.global_batch_size, cfg.micro_batches());
  std::printf("cluster: %d nodes x %d devices; layout T%d P%d D%d; links: intra %.3g GB/s %.3g us, inter %.3g GB/s "
              "%.3g us%s\n",
              cl.nodes, cl.devices_per_node, cfg.tp, cfg.pp, cfg.dp, cl.intra.bandwidth / 1e9, cl.intra.latency * 1e6,
              cl.inter.bandwidth / 1e9, cl.inter.latency * 1e6, cl.free_comm ? " (--no-comm: all free)" : "");
  std::printf("schedule: %s; optimizer: %s%s%s\n",
              cfg.chunks() > 1 ? fmt::format("interleaved 1F1B, {} model chunks of {} layers per stage", cfg.chunks(),
                                             cfg.layers_per_virtual_stage)
                                     .c_str()
                               : "1F1B",
              cfg.use_distributed_optimizer && cfg.dp > 1 ? "distributed (Adam state sharded over DP)" : "replicated",
              cfg.overlap_param_gather && cfg.dp > 1 ? ", parameter all-gather overlapped with the next forward" : "",
              cfg.sequence_parallel ? "; sequence parallel" : "");

  if (app.count("--max-loss-increase") && !auto_mode)
    throw UsageError("--max-loss-increase chooses among plans: it needs --auto");
  if (app.count("--max-loss-increase") && lim.max_loss_increase < 0)
    throw UsageError(fmt::format("--max-loss-increase must be >= 0 (a percentage; got {})", lim.max_loss_increase));
  if (!objective.note.empty()) std::printf("%s\n", objective.note.c_str());
  std::unique_ptr<LossCostTable> loss_costs;
  if (objective.objective == PlanObjective::LossBudget) {
    loss_costs = std::make_unique<LossCostTable>(LossCostTable::load(loss_costs_path));
    // DiLoCo's measurements, where they exist (an explicit --diloco-json must).
    if (app.count("--diloco-json") || std::ifstream(diloco_costs_path).good()) loss_costs->load_more(diloco_costs_path);
    lim.loss_costs = loss_costs.get();
  }
  PlanConfig shown = cfg;
  AutoResult target_result;
  if (auto_mode && objective.objective == PlanObjective::TimeToTarget) {
    lim.target = objective.regime;
    target_result = auto_plan(cfg, lim, measured);
    print_time_to_target(objective, target_result, lim.tolerance);
    shown = target_result.chosen.cfg;
  } else if (auto_mode && loss_costs) {
    std::printf("objective: loss-budget (the fastest plan within +%.2f %% expected loss)\n", lim.max_loss_increase);
    const AutoResult a = auto_plan(cfg, lim, measured);
    std::string sources;
    for (const std::string& p : loss_costs->paths()) sources += (sources.empty() ? "" : " and ") + p;
    std::printf("auto (quality-aware): %d plans from the measured methods of %s; %d within +%.2f %% expected loss\n",
                a.evaluated, sources.c_str(), a.within_budget, lim.max_loss_increase);
    std::printf("baseline %.3f ms; fastest within budget %.3f ms (%s; expected loss %+.2f %%)\n",
                a.baseline.seconds * 1e3, a.fastest.seconds * 1e3, compression_summary(a.fastest.cfg).c_str(),
                a.fastest.loss.pct);
    std::printf("chosen: %.3f ms, %.3fx over baseline: %s (the lowest expected loss within %.1f %% of the fastest)\n",
                a.chosen.seconds * 1e3, a.baseline.seconds / a.chosen.seconds, compression_summary(a.chosen.cfg).c_str(),
                lim.tolerance * 100);
    std::printf("expected loss cost: %+.2f %% of the baseline's final validation loss: %s\n", a.chosen.loss.pct,
                a.chosen.loss.how.c_str());
    std::printf("train flags: %s\n", compression_flags(a.chosen.cfg).c_str());
    std::printf("why (critical path, baseline -> chosen):\n");
    for (const auto& line : a.explanation) std::printf("  %s\n", line.c_str());
    shown = a.chosen.cfg;
  } else if (auto_mode) {
    if (objective.note.empty()) std::printf("objective: time (the least compressing plan among the fastest)\n");
    const AutoResult a = auto_plan(cfg, lim, measured);
    std::printf("auto: %d plans evaluated; baseline %.3f ms, fastest %.3f ms (%s)\n", a.evaluated,
                a.baseline.seconds * 1e3, a.fastest.seconds * 1e3, compression_summary(a.fastest.cfg).c_str());
    std::printf("chosen: %.3f ms, %.3fx over baseline: %s (the least compressing plan within %.1f %% of the fastest; "
                "%.1f %% of DP gradient elements compressed, %.1f %% of backward messages)\n",
                a.chosen.seconds * 1e3, a.baseline.seconds / a.chosen.seconds, compression_summary(a.chosen.cfg).c_str(),
                lim.tolerance * 100, a.chosen.compressed_fraction * 100, a.chosen.cb_fraction * 100);
    std::printf("train flags: %s\n", compression_flags(a.chosen.cfg).c_str());
    std::printf("why (critical path, baseline -> chosen):\n");
    for (const auto& line : a.explanation) std::printf("  %s\n", line.c_str());
    shown = a.chosen.cfg;
  }
  const CostModel model = build_cost_model(shown, measured);
  const SimResult r = simulate(model.input);
  std::printf("compute: %s\n", model.compute_source.c_str());
  print_prediction(shown, model, r, show_path);
  if (!json_path.empty()) {
    nlohmann::json j = {{"iteration_ms", mean_iteration_seconds(model, r.iteration) * 1e3},
                        {"compression", compression_summary(shown)}, {"train_flags", compression_flags(shown)}};
    if (model.diloco.on) {
      j["inner_iteration_ms"] = r.iteration * 1e3;
      j["diloco_round_ms"] = model.diloco.per_round(r.iteration) * 1e3;
      for (const StageFacts& f : model.facts) j["outer_state_gib"].push_back(f.outer_state_bytes / double(1 << 30));
      for (const auto& stage : model.diloco.stages) {
        nlohmann::json per_fragment = nlohmann::json::array();
        for (const DilocoFragmentCost& c : stage) per_fragment.push_back({{"elements", c.elements}, {"bytes", c.bytes}});
        j["diloco_sync_per_rank"].push_back(per_fragment);
      }
    }
    if (auto_mode) j["objective"] = objective_name(objective.objective);
    if (objective.regime) {
      const Candidate& c = target_result.chosen;
      const bool known = c.iterations.known && c.iterations.reached;
      j["regime"] = objective.regime->name;
      j["iterations_to_target"] = known ? nlohmann::json(c.iterations.iterations) : nlohmann::json();
      j["predicted_time_to_target_s"] = known ? nlohmann::json(c.time_to_target()) : nlohmann::json();
      j["iterations_how"] = c.iterations.how;
    }
    if (loss_costs) {
      const LossEstimate e = loss_costs->estimate(shown);
      j["expected_loss_increase_pct"] = e.known ? nlohmann::json(e.pct) : nlohmann::json();
      j["expected_loss_how"] = e.how;
    }
    for (Category c : all_categories()) j["critical_ms"][category_name(c)] = r.critical.at(c) * 1e3;
    if (cal) j["calibrated_ms"] = cal->measured_ms;
    for (const StageFacts& f : model.facts) {
      j["model_state_gib"].push_back(f.model_state_bytes / double(1 << 30));
      j["activation_gib"].push_back(f.activation_bytes / double(1 << 30));
      j["tp_bytes_per_micro_batch"].push_back(f.tp_bytes_forward + f.tp_bytes_backward);
      j["tp_ms_per_micro_batch"].push_back((f.tp_seconds_forward + f.tp_seconds_backward) * 1e3);
      j["dp_bytes_per_rank"].push_back(f.dp_bytes);
      j["micro_batches_in_flight"].push_back(f.in_flight);
    }
    for (const StageTimes& st : model.input.stages)
      j["compute_ms_per_micro_batch"].push_back((st.forward + st.backward) * 1e3);  // TP collectives inside included
    j["micro_batches"] = shown.micro_batches();
    j["links"] = {{"inter_bandwidth", cl.inter.bandwidth}, {"inter_latency_s", cl.inter.latency},
                  {"inter_message_latency_s", cl.inter.message_latency()}, {"intra_bandwidth", cl.intra.bandwidth},
                  {"intra_latency_s", cl.intra.latency}};
    if (cal) j["achieved_flops_per_rank"] = cal->measured.achieved_flops;
    j["model_chunks"] = shown.chunks();
    // Per TP rank: an activation message as sent forward, an uncompressed one backward.
    j["pp_forward_bytes"] = model.pp_forward_bytes;
    j["pp_message_bytes"] = model.pp_message_bytes;
    j["embedding_bytes"] = model.embedding_bytes;
    j["bytes_per_value"] = {{"activations", shown.bytes_per_value}, {"tp_sums", shown.tp_sum_bytes()},
                            {"gradients", shown.grad_bytes()}};
    write_file_atomic(json_path, j.dump(2) + "\n");
  }
  return 0;
}

}  // namespace occ::cmd
