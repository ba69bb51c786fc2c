// bench --peak's kernels (cpu_peak.h). Compiled for AVX-512 by target
// attributes and run only where the CPU has the instructions.
#include "kernels/cpu_peak.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

#include "core/timer.h"

namespace occ::kernels {

namespace {

constexpr int kAcc = 12;  // independent accumulators per thread

__attribute__((target("avx512f"))) float fma_f32(int64_t iters) {
  __m512 acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_set1_ps(float(i) * 1e-3f);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t n = 0; n < iters; ++n) {
#pragma GCC unroll 12
    for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kAcc; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx512f,avx512bf16"))) float dot_bf16(int64_t iters) {
  __m512 acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_set1_ps(float(i) * 1e-3f);
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(2e-3f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-4f), _mm512_set1_ps(-1e-4f));
  for (int64_t n = 0; n < iters; ++n) {
#pragma GCC unroll 12
    for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kAcc; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_reduce_add_ps(s);
}

volatile float g_sink = 0.0f;  // the kernels' results go somewhere

}  // namespace

FmaPeak measure_fma_peak(bool bf16, int threads, int64_t iters, int repeats) {
  FmaPeak r;
  r.threads = threads;
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f")) {
    r.why = "the CPU has no AVX-512";
    return r;
  }
  if (bf16 && !__builtin_cpu_supports("avx512bf16")) {
    r.why = "the CPU has no AVX512_BF16";
    return r;
  }
  const double flop_per_instr = bf16 ? 64.0 : 32.0;  // 16 lanes x (2 products + 2 adds | 1 FMA)
  const double flops_per_thread = double(iters) * kAcc * flop_per_instr;
  double best = 1e30, best_rate = 0.0;
  std::vector<double> cpu(static_cast<size_t>(threads));
  for (int rep = 0; rep <= repeats; ++rep) {  // rep 0 warms up (clocks, thread start)
    const double t0 = now_seconds();
#pragma omp parallel num_threads(threads)
    {
      const double c0 = thread_cpu_seconds();
      const float v = bf16 ? dot_bf16(iters) : fma_f32(iters);
      cpu[size_t(omp_get_thread_num())] = thread_cpu_seconds() - c0;
      if (v == 12345.0f) g_sink = v;
    }
    const double t = now_seconds() - t0;
    double rate = 0.0;
    for (double c : cpu) rate += flops_per_thread / std::max(c, 1e-9);
    if (rep > 0) best = std::min(best, t), best_rate = std::max(best_rate, rate);
  }
  r.measured = true;
  r.seconds = best;
  r.gflops = best_rate * 1e-9;
  r.wall_gflops = double(threads) * flops_per_thread / best * 1e-9;
  return r;
}

ClockReading read_clock() {
  ClockReading c;
  // A dependent chain of integer multiplies: 3 cycles each on every x86 core since Nehalem
  // and Zen (a chain of adds can run faster where the core folds immediate adds at rename).
  const int64_t n = 100'000'000;
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    uint64_t x = uint64_t(rep) + 1;
    const double t0 = thread_cpu_seconds();
    for (int64_t i = 0; i < n; ++i) __asm__ volatile("imul $3, %0, %0" : "+r"(x));
    best = std::min(best, thread_cpu_seconds() - t0);
    if (x == 7) g_sink = 1.0f;
  }
  c.measured_ghz = 3.0 * double(n) / best * 1e-9;
  if (FILE* f = std::fopen("/proc/cpuinfo", "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, f))
      if (std::strncmp(line, "cpu MHz", 7) == 0) {
        if (const char* colon = std::strchr(line, ':')) c.cpuinfo_mhz = std::atof(colon + 1);
        break;
      }
    std::fclose(f);
  }
  return c;
}

}  // namespace occ::kernels
