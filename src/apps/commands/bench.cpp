// `optimus-cc bench`: times full training steps (forward + backward + global
// grad-norm clip + AdamW) of a single-process model on random tokens, and the
// sgemm peak of the linked BLAS in the same run, so that the achieved GFLOP/s
// can be read as a fraction of what the matrix multiplies alone could reach.
// bench/torch_step.py runs the same presets in PyTorch; python3 -m occtools bench-core
// interleaves the two and prints the comparison.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/commands/commands.h"
#include "train/output_paths.h"
#include "apps/commands/train_flags.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/timer.h"
#include "kernels/cpu_gemm.h"
#include "kernels/cpu_peak.h"
#include "kernels/timed_ops.h"
#include "model/gpt.h"

extern "C" char* openblas_get_corename(void);

namespace occ::cmd {

namespace {

struct Preset {
  int num_layers, num_attention_heads, hidden_size, vocab_size, micro_batch_size, seq_length;
  const char* description;
  int query_groups = 0;  // > 0: a Llama-style model (RMSNorm, SwiGLU, RoPE, GQA, untied, no biases)
};

// (a) the small model of the tests; (b) GPT-2-small-shaped layers with a small
// vocabulary so that the transformer layers, not the LM head, dominate.
const Preset kPresetA{4, 4, 128, 50304, 4, 64, "4 layers, 4 heads, hidden 128, vocab 50304, micro-batch 4, seq 64"};
const Preset kPresetB{4, 12, 768, 1024, 4, 256,
                      "GPT-2-small-shaped layers: 4 layers, 12 heads, hidden 768, vocab 1024, micro-batch 4, seq 256"};
// The same shapes as Llama-style models: RMSNorm, SwiGLU (Megatron's default width), RoPE,
// grouped-query attention, untied embeddings, no linear biases.
const Preset kPresetLlamaA{4, 4, 128, 50304, 4, 64, "preset a as Llama: 4 heads in 2 query groups", 2};
const Preset kPresetLlamaB{4, 12, 768, 1024, 4, 256, "preset b as Llama: 12 heads in 4 query groups", 4};

// The 1-minute load average: the machine may be shared, and a busy one slows every number here.
double load_average() {
  double l = -1.0;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &l) != 1) l = -1.0;
    std::fclose(f);
  }
  return l;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct GemmResult {
  int M, N, K, threads;
  double best_ms, gflops;  // wall time
  double best_cpu_ms, cpu_gflops;  // process CPU time (all threads)
};

// Best of `reps` row-major C[M,N] = A[M,K] . B[N,K]^T (the layout linear_forward
// uses) with `threads` BLAS threads.
GemmResult time_sgemm(int M, int N, int K, int threads, int reps) {
  std::vector<float> a(size_t(M) * K), b(size_t(N) * K), c(size_t(M) * N);
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(int(i % 17) - 8) * 0.01f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = float(int(i % 13) - 6) * 0.01f;
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
  double best = 1e30, best_cpu = 1e30;
  for (int r = 0; r <= reps; ++r) {  // r = 0 warms up: page faults, BLAS buffers, thread start
    const double t0 = now_seconds(), c0 = process_cpu_seconds();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f, c.data(), N);
    const double t = now_seconds() - t0, c = process_cpu_seconds() - c0;
    if (r > 0) best = std::min(best, t), best_cpu = std::min(best_cpu, c);
  }
  omp_set_num_threads(saved);
  openblas_set_num_threads(saved);
  const double flop = 2.0 * M * N * K;
  return {M, N, K, threads, best * 1e3, flop / best * 1e-9, best_cpu * 1e3, flop / best_cpu * 1e-9};
}

}  // namespace

int bench(int argc, char** argv) {
  CLI::App app{"Time training steps (forward + backward + grad-norm clip + AdamW) on random tokens, and the "
               "sgemm peak of the BLAS, in one run",
               "bench"};
  TrainOptions opt;
  // Dropout off by default: the comparison is with a dropout-free PyTorch step.
  opt.model.hidden_dropout = opt.model.attention_dropout = 0.0f;
  add_model_flags(app, opt.model);
  add_optimizer_flags(app, opt);
  std::string preset = "custom", json_path;
  int steps = 5, warmup = 2, repeats = 5, peak_reps = 5;
  bool no_peak = false, phase_waits = false, fma_peak = false;
  int64_t peak_iters = 20'000'000;
  int op_profile_steps = 0;
  opt.model.vocab_size = 50304;
  app.add_option("--preset", preset,
                 "a: 4 layers, 4 heads, hidden 128, vocab 50304, micro-batch 4, seq 64; "
                 "b: 4 layers, 12 heads, hidden 768, vocab 1024, micro-batch 4, seq 256; "
                 "llama-a, llama-b: the same shapes Llama-style (RMSNorm, SwiGLU, RoPE, 2 / 4 query groups, untied, "
                 "no biases); custom: the model flags (flags given explicitly override a preset)")
      ->check(CLI::IsMember({"a", "b", "llama-a", "llama-b", "custom"}))
      ->capture_default_str();
  app.add_option("--vocab-size", opt.model.vocab_size, "vocabulary (padded by the model)")->capture_default_str();
  app.add_option("--micro-batch-size", opt.micro_batch_size)->capture_default_str();
  app.add_option("--steps", steps, "timed training steps per repeat")->capture_default_str();
  app.add_option("--warmup", warmup, "untimed training steps first")->capture_default_str();
  app.add_option("--repeats", repeats, "timed repeats (best and median reported)")->capture_default_str();
  app.add_option("--peak-reps", peak_reps, "sgemm repetitions per peak size (best kept)")->capture_default_str();
  app.add_flag("--no-peak", no_peak, "skip the sgemm peak measurement");
  app.add_flag("--peak", fma_peak,
               "also measure the cores' fp32 and bf16 FMA peak (AVX-512 FMA and vdpbf16ps on every thread) and the "
               "clock; --op-profile measures it too and reports each op as a fraction of it");
  app.add_option("--peak-iters", peak_iters, "loop iterations per thread of the FMA peak kernel (12 FMAs each)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--phase-waits", phase_waits,
               "wait for the device after forward and after backward, so that the phase times split the step "
               "truly (on a GPU the step otherwise waits once, for the gradient norm)");
  app.add_option("--op-profile", op_profile_steps,
                 "after the timed repeats, run N more steps with every backend call timed on its own "
                 "(the device is waited for around each), and print where a step's time goes")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--json", json_path, "also write every number to this JSON file");
  app.add_option("--device", opt.device_name, "cpu | cuda (default: cuda when available)");
  app.add_flag("--bf16", opt.bf16, "train in bf16 (see train --bf16)");
  add_attention_backend_flag(app, opt);
  app.add_option("--recompute-granularity", opt.recompute_granularity, "selective | full");
  if (int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;
  if (!json_path.empty()) {  // now, not after the measurements; not over a file the command line read (--config)
    OutputPaths outputs;
    outputs.file("--json", json_path);
    outputs.check();
  }
  refuse_inapplicable_model_flags(app, opt.model);

  GptConfig& m = opt.model;
  if (preset != "custom") {
    const Preset& p = preset == "a"         ? kPresetA
                      : preset == "b"       ? kPresetB
                      : preset == "llama-a" ? kPresetLlamaA
                                            : kPresetLlamaB;
    auto set = [&](const char* flag, int& field, int value) {
      if (app.count(flag) == 0) field = value;
    };
    set("--num-layers", m.num_layers, p.num_layers);
    set("--num-attention-heads", m.num_attention_heads, p.num_attention_heads);
    set("--hidden-size", m.hidden_size, p.hidden_size);
    set("--vocab-size", m.vocab_size, p.vocab_size);
    set("--micro-batch-size", opt.micro_batch_size, p.micro_batch_size);
    set("--seq-length", m.seq_length, p.seq_length);
    if (p.query_groups > 0) {
      m.normalization = Normalization::RMSNorm, m.swiglu = true, m.position_embedding = PositionEmbedding::Rope;
      m.group_query_attention = true;
      set("--num-query-groups", m.num_query_groups, p.query_groups);
      m.untie_embeddings_and_output_weights = true, m.add_bias_linear = false;
    }
  }
  if (app.count("--max-position-embeddings") == 0) m.max_position_embeddings = m.seq_length;
  OCC_CHECK(steps >= 1 && repeats >= 1 && warmup >= 0 && peak_reps >= 1,
            "bench: --steps and --repeats must be >= 1, --warmup >= 0, --peak-reps >= 1");
  // The learning rate is held at --lr (no schedule): the step's cost does not depend on it.
  opt.lr_warmup_iters = 0;
  opt.lr_decay_style = "constant";
  opt.train_iters = warmup + int64_t(steps) * repeats;
  opt.global_batch_size = opt.micro_batch_size;
  ParallelLayout layout;
  opt.resolve_device();
  opt.validate(layout);
  require_device(opt.device);

  const int B = opt.micro_batch_size, T = m.seq_length, V = m.padded_vocab_size(), L = m.num_layers,
            C = m.hidden_size;
  const int threads = omp_get_max_threads();
  const int64_t tokens = int64_t(B) * T;
  // Matmul FLOPs of one step (forward 2 per multiply-add, backward twice the forward).
  // The layers' matrices (GPT-2: 12 C^2 weights per layer; GptConfig counts SwiGLU's and GQA's).
  const double flops_layers = 6.0 * L * double(m.layer_matrix_params()) * double(tokens);
  const double flops_head = 6.0 * double(V) * C * double(tokens);
  const double flops_attn = 12.0 * L * double(T) * T * C * B;  // full T x T, as computed
  const double flops = flops_layers + flops_head + flops_attn;
  const char* formula =
      "FLOP/step = 6*(12*L*C^2)*B*T [layer matmul weights] + 6*V*C*B*T [tied LM head, padded V] "
      "+ 12*L*B*T^2*C [attention QK^T and PV, full T x T]";

  SelfCommunicator self;
  // With --op-profile every backend call goes through a timing decorator, off until the profiled steps.
  std::unique_ptr<kernels::TimedOps> timed_ops;
  StageOptions stage_options{opt.device, opt.recompute(), opt.precision()};
  if (op_profile_steps > 0) {
    timed_ops = std::make_unique<kernels::TimedOps>(kernels::ops_for(opt.device));
    timed_ops->set_enabled(false);
    stage_options.ops = timed_ops.get();
  }
  kernels::select_attention_backend(opt.device, opt.attention_backend);
  GptStage stage(m, layout, self, opt.seed, stage_options);
  AdamW adam(stage.param_layout(), opt.adam, stage.ops());
  const int64_t nparams = stage.param_layout().total();

  // A few batches of random tokens, made before timing.
  const int kBatches = 4;
  std::vector<std::vector<int32_t>> inputs(kBatches), labels(kBatches);
  for (int k = 0; k < kBatches; ++k) {
    const uint64_t key = make_key(opt.seed, 0xBE7Cull, uint64_t(k));
    inputs[k].resize(size_t(tokens));
    labels[k].resize(size_t(tokens));
    for (int64_t i = 0; i < tokens; ++i) {
      inputs[k][size_t(i)] = int32_t(Philox::block(key, 0, uint64_t(i))[0] % uint32_t(m.vocab_size));
      labels[k][size_t(i)] = int32_t(Philox::block(key, 1, uint64_t(i))[0] % uint32_t(m.vocab_size));
    }
  }

  StageActivations acts = stage.make_activations();
  double t_fwd = 0, t_bwd = 0, t_opt = 0;
  std::vector<double> losses;
  int64_t step_no = 0;
  auto train_step = [&]() {
    const int k = int(step_no % kBatches);
    MicroBatch mb{inputs[k].data(), labels[k].data(), B, T, 0, step_no, 1.0f / float(tokens)};
    const double t0 = now_seconds();
    stage.zero_grads();
    stage.forward(acts, mb, nullptr, nullptr, true);
    if (phase_waits) stage.ops().synchronize();  // GPU kernels run asynchronously
    const double t1 = now_seconds();
    stage.backward(acts, mb, nullptr, nullptr);
    if (phase_waits) stage.ops().synchronize();
    const double t2 = now_seconds();
    // The step's one wait for the device: the gradient norm (the loss follows it).
    const double norm = std::sqrt(local_grad_sq_norm(stage.ops(), stage.param_layout(), stage.grads().data()));
    const double loss = stage.take_loss_sum() / double(tokens);
    clip_grads(stage.ops(), stage.grads().data(), int64_t(stage.grads().size()), norm, opt.clip_grad);
    adam.update(stage.params().data(), stage.grads().data(), opt.lr, step_no + 1);
    stage.ops().synchronize();
    const double t3 = now_seconds();
    t_fwd += t1 - t0;
    t_bwd += t2 - t1;
    t_opt += t3 - t2;
    losses.push_back(loss);
    ++step_no;
  };

  std::printf("bench: preset %s: %d layers, %d heads, hidden %d, seq %d, micro-batch %d, vocab %d (padded %d), "
              "%lld parameters, dropout %g/%g\n",
              preset.c_str(), L, m.num_attention_heads, C, T, B, m.vocab_size, V, (long long)nparams,
              m.hidden_dropout, m.attention_dropout);
  std::printf("bench: architecture %s\n", m.describe_architecture().c_str());
  std::printf("bench: device %s, precision %s, recompute %s\nbench: attention %s\n",
              describe_device(opt.device).c_str(), precision_name(opt.precision()), recompute_name(opt.recompute()),
              stage.ops().attention_description(opt.precision()).c_str());
  std::printf("bench: %d OpenMP threads, OpenBLAS core %s; %d warm-up steps, %d repeats of %d steps\n", threads,
              openblas_get_corename(), warmup, repeats, steps);
  const std::string gemm_path = stage.ops().gemm_description(opt.precision());
  std::printf("bench: matrix products %s\n", gemm_path.c_str());
  std::fflush(stdout);

  const double load_before = load_average();
  for (int i = 0; i < warmup; ++i) train_step();
  t_fwd = t_bwd = t_opt = 0;
  std::vector<double> rep_ms, rep_cpu_ms;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = now_seconds(), c0 = process_cpu_seconds();
    for (int s = 0; s < steps; ++s) train_step();
    rep_ms.push_back((now_seconds() - t0) * 1e3 / steps);
    rep_cpu_ms.push_back((process_cpu_seconds() - c0) * 1e3 / steps);
  }
  const double timed_steps = double(steps) * repeats;
  const double best_ms = *std::min_element(rep_ms.begin(), rep_ms.end()), med_ms = median(rep_ms);
  OCC_CHECK(std::isfinite(losses.back()), "bench: the loss became {} — the model diverged", losses.back());

  // sgemm peak: model-shaped (the MLP up-projection) and large square-ish sizes.
  std::vector<GemmResult> gemms;
  double peak1 = 0, peakN = 0, peak1_cpu = 0;
  if (!no_peak) {
    const int sizes[][3] = {{int(tokens), 4 * C, C}, {1024, 768, 768}, {2048, 2048, 2048}};
    for (int th : threads > 1 ? std::vector<int>{1, threads} : std::vector<int>{1})
      for (const auto& s : sizes) {
        gemms.push_back(time_sgemm(s[0], s[1], s[2], th, peak_reps));
        double& peak = th == 1 ? peak1 : peakN;
        peak = std::max(peak, gemms.back().gflops);
        if (th == 1) peak1_cpu = std::max(peak1_cpu, gemms.back().cpu_gflops);
      }
    if (threads == 1) peakN = peak1;
  }

  // The cores' FMA peak (fp32 and bf16) at the run's thread count, and the clock it ran at.
  kernels::FmaPeak fma32, fma16;
  kernels::ClockReading clock;
  if (fma_peak || op_profile_steps > 0) {
    fma32 = kernels::measure_fma_peak(false, threads, peak_iters, 5);
    fma16 = kernels::measure_fma_peak(true, threads, peak_iters, 5);
    clock = kernels::read_clock();
  }
  // The peak an op is held to: bf16's where the step's products run in bf16.
  const bool bf16_products = opt.device == Device::Cpu && opt.precision() == Precision::Bf16 &&
                             kernels::cpu_gemm_uses_bf16() && fma16.measured;
  const double op_peak = bf16_products ? fma16.gflops : fma32.gflops;

  const double gflops_best = flops / (best_ms * 1e-3) * 1e-9, gflops_med = flops / (med_ms * 1e-3) * 1e-9;
  const double best_cpu_ms = *std::min_element(rep_cpu_ms.begin(), rep_cpu_ms.end());
  const double gflops_cpu = flops / (best_cpu_ms * 1e-3) * 1e-9;
  std::printf("\n%s\n", formula);
  std::printf("  = %.3f GFLOP/step (layers %.3f, LM head %.3f, attention %.3f)\n", flops * 1e-9, flops_layers * 1e-9,
              flops_head * 1e-9, flops_attn * 1e-9);
  std::string reps;
  for (double r : rep_ms) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%.2f", reps.empty() ? "" : ", ", r);
    reps += buf;
  }
  std::printf("step: best %.3f ms, median %.3f ms over %d repeats (%s)\n", best_ms, med_ms, repeats, reps.c_str());
  std::printf("      process CPU time per step: best %.3f ms, median %.3f ms (all threads together)\n", best_cpu_ms,
              median(rep_cpu_ms));
  std::printf("      phases (mean per step%s): forward %.3f ms, backward %.3f ms, clip + AdamW %.3f ms\n",
              phase_waits || opt.device == Device::Cpu ? "" : ", as queued: --phase-waits splits them truly",
              t_fwd * 1e3 / timed_steps, t_bwd * 1e3 / timed_steps, t_opt * 1e3 / timed_steps);
  std::printf("peak memory in tensors on %s: %.1f MiB\n", device_name(opt.device),
              double(device_peak_bytes(opt.device)) / (1 << 20));
  std::printf("tokens/s: %.0f (best), %.0f (median)\n", tokens / (best_ms * 1e-3), tokens / (med_ms * 1e-3));
  std::printf("achieved: %.2f GFLOP/s (best), %.2f (median)\n", gflops_best, gflops_med);
  if (!no_peak) {
    for (const auto& g : gemms)
      std::printf("sgemm %dx%dx%d (NT), %d thread%s: best %.3f ms = %.2f GFLOP/s\n", g.M, g.N, g.K, g.threads,
                  g.threads == 1 ? "" : "s", g.best_ms, g.gflops);
    if (threads == 1)
      std::printf("sgemm peak: %.2f GFLOP/s (1 thread)\n", peak1);
    else
      std::printf("sgemm peak: %.2f GFLOP/s (1 thread), %.2f GFLOP/s (%d threads)\n", peak1, peakN, threads);
    std::printf("achieved / peak at %d thread%s: %.1f%% (best), %.1f%% (median)\n", threads, threads == 1 ? "" : "s",
                100.0 * gflops_best / peakN, 100.0 * gflops_med / peakN);
    if (threads == 1)  // CPU time: what a busy machine's time slicing does not inflate
      std::printf("by CPU time (1 thread): %.2f GFLOP/s of a %.2f GFLOP/s sgemm peak = %.1f%%\n", gflops_cpu, peak1_cpu,
                  100.0 * gflops_cpu / peak1_cpu);
  }
  if (fma32.measured || !fma32.why.empty()) {
    for (const auto* p : {&fma32, &fma16}) {
      const char* name = p == &fma32 ? "fp32 (vfmadd231ps)" : "bf16 (vdpbf16ps)";
      if (!p->measured) {
        std::printf("fma peak %s: not measured: %s\n", name, p->why.c_str());
        continue;
      }
      std::printf("fma peak %s: %.1f GFLOP/s on %d thread%s (%.1f per thread, %.1f FLOP/cycle/thread at the "
                  "measured clock; by thread CPU time, best of 5 of %lld iterations; by wall time %.1f)\n",
                  name, p->gflops, p->threads, p->threads == 1 ? "" : "s", p->gflops / p->threads,
                  p->gflops / p->threads / clock.measured_ghz, (long long)peak_iters, p->wall_gflops);
    }
    std::printf("clock: %.2f GHz measured (dependent multiplies per thread CPU second); /proc/cpuinfo cpu MHz %.0f\n",
                clock.measured_ghz, clock.cpuinfo_mhz);
    if (op_peak > 0)
      std::printf("step / fma peak (%s): %.1f%% (best)\n", bf16_products ? "bf16" : "fp32",
                  100.0 * gflops_best / op_peak);
  }
  nlohmann::json op_profile = nlohmann::json::array();
  if (timed_ops) {
    timed_ops->set_enabled(true);
    const double t0 = now_seconds();
    for (int s = 0; s < op_profile_steps; ++s) train_step();
    const double wall_ms = (now_seconds() - t0) * 1e3 / op_profile_steps;
    timed_ops->set_enabled(false);
    const double total_ms = timed_ops->total_seconds() * 1e3 / op_profile_steps;
    std::printf("\nop profile: %d steps, each call timed alone (the device waited for around it): "
                "%.2f ms/step in backend calls of %.2f ms/step wall\n",
                op_profile_steps, total_ms, wall_ms);
    std::printf("  GFLOP/s of the matrix products; %% peak: of the %s FMA peak, %.1f GFLOP/s on %d threads\n",
                bf16_products ? "bf16" : "fp32", op_peak, threads);
    std::printf("  %-44s %9s %10s %7s %10s %7s\n", "op", "calls/st", "ms/step", "share", "GFLOP/s", "% peak");
    for (const auto& a : timed_ops->accounts()) {
      const double ms = a.seconds * 1e3 / op_profile_steps;
      const double tflops = a.flops > 0 && a.seconds > 0 ? a.flops / a.seconds * 1e-12 : 0.0;
      const double of_peak = tflops > 0 && op_peak > 0 ? tflops * 1e3 / op_peak : 0.0;
      std::printf("  %-44s %9.1f %10.3f %6.1f%% %10s %7s\n", a.name.c_str(), double(a.calls) / op_profile_steps, ms,
                  100.0 * ms / total_ms, tflops > 0 ? fmt::format("{:.1f}", tflops * 1e3).c_str() : "",
                  of_peak > 0 ? fmt::format("{:.1f}%", 100.0 * of_peak).c_str() : "");
      op_profile.push_back({{"op", a.name},
                            {"calls_per_step", double(a.calls) / op_profile_steps},
                            {"ms_per_step", ms},
                            {"share", ms / total_ms},
                            {"tflops", tflops},
                            {"fraction_of_peak", of_peak}});
    }
  }
  const double load_after = load_average();
  std::printf("loss: first %.4f, last %.4f; load average %.2f before, %.2f after (%d vCPUs)\n", losses.front(),
              losses.back(), load_before, load_after, omp_get_num_procs());

  if (!json_path.empty()) {
    nlohmann::json j;
    j["engine"] = "optimus-cc";
    j["preset"] = preset;
    j["model"] = {{"num_layers", L},
                  {"num_attention_heads", m.num_attention_heads},
                  {"hidden_size", C},
                  {"seq_length", T},
                  {"max_position_embeddings", m.max_position_embeddings},
                  {"vocab_size", m.vocab_size},
                  {"padded_vocab_size", V},
                  {"micro_batch_size", B},
                  {"hidden_dropout", m.hidden_dropout},
                  {"attention_dropout", m.attention_dropout},
                  {"parameters", nparams}};
    j["device"] = describe_device(opt.device);
    j["precision"] = precision_name(opt.precision());
    j["recompute"] = recompute_name(opt.recompute());
    j["peak_device_mib"] = double(device_peak_bytes(opt.device)) / (1 << 20);
    j["threads"] = threads;
    j["blas_core"] = openblas_get_corename();
    j["warmup"] = warmup;
    j["steps"] = steps;
    j["repeats"] = repeats;
    j["repeat_ms"] = rep_ms;
    j["best_ms"] = best_ms;
    j["median_ms"] = med_ms;
    j["repeat_cpu_ms"] = rep_cpu_ms;
    j["best_cpu_ms"] = best_cpu_ms;
    j["gflops_cpu_best"] = gflops_cpu;
    j["phase_ms"] = {{"forward", t_fwd * 1e3 / timed_steps},
                     {"backward", t_bwd * 1e3 / timed_steps},
                     {"clip_adamw", t_opt * 1e3 / timed_steps}};
    j["tokens_per_step"] = tokens;
    j["tokens_per_s_best"] = tokens / (best_ms * 1e-3);
    j["tokens_per_s_median"] = tokens / (med_ms * 1e-3);
    j["flop_formula"] = formula;
    j["flops_per_step"] = flops;
    j["flops_breakdown"] = {{"layers", flops_layers}, {"lm_head", flops_head}, {"attention", flops_attn}};
    j["gflops_best"] = gflops_best;
    j["gflops_median"] = gflops_med;
    if (!no_peak) {
      nlohmann::json g = nlohmann::json::array();
      for (const auto& r : gemms)
        g.push_back({{"M", r.M}, {"N", r.N}, {"K", r.K}, {"threads", r.threads}, {"best_ms", r.best_ms},
                     {"gflops", r.gflops}, {"best_cpu_ms", r.best_cpu_ms}, {"cpu_gflops", r.cpu_gflops}});
      j["sgemm"] = g;
      j["sgemm_peak_1thread_gflops"] = peak1;
      j["sgemm_peak_1thread_cpu_gflops"] = peak1_cpu;
      j["sgemm_peak_gflops"] = peakN;
      j["percent_of_peak_best"] = 100.0 * gflops_best / peakN;
      j["percent_of_peak_median"] = 100.0 * gflops_med / peakN;
    }
    if (timed_ops) j["op_profile"] = op_profile;
    j["matrix_products"] = gemm_path;
    if (fma32.measured) {
      j["fma_peak_fp32_gflops"] = fma32.gflops;
      if (fma16.measured) j["fma_peak_bf16_gflops"] = fma16.gflops;
      j["clock_measured_ghz"] = clock.measured_ghz;
      j["clock_cpuinfo_mhz"] = clock.cpuinfo_mhz;
      j["op_peak_gflops"] = op_peak;
    }
    j["loss_first"] = losses.front();
    j["loss_last"] = losses.back();
    j["load_average"] = {load_before, load_after};
    j["vcpus"] = omp_get_num_procs();
    std::ofstream out(json_path);
    OCC_CHECK(out.good(), "bench: cannot write --json file {}; check the directory", json_path);
    out << j.dump(2) << "\n";
  }
  return 0;
}

}  // namespace occ::cmd
