#pragma once
// The cores' FMA peak, measured (issue 51, `bench --peak`): a kernel written for
// it, with 12 independent AVX-512 accumulators per thread (more than an FMA's
// latency times its ports, so no accumulator waits on itself), run on every
// thread of the run at once. fp32: vfmadd231ps, 2 FLOP per lane; bf16:
// vdpbf16ps, two bf16 products added to each fp32 lane, 4 FLOP per lane.
#include <cstdint>
#include <string>

namespace occ::kernels {

struct FmaPeak {
  bool measured = false;  // false: the CPU lacks the instructions (why says which)
  std::string why;
  int threads = 0;
  // All threads together, best of the repeats, each thread's FLOPs over its own CPU time
  // (CLOCK_THREAD_CPUTIME_ID): what the cores do while they run it, which a loaded machine's
  // time slicing does not dilute.
  double gflops = 0.0;
  double wall_gflops = 0.0;  // the same FLOPs over the wall time (diluted by other jobs)
  double seconds = 0.0;      // the best repeat's wall time
};

// `iters` loop iterations per thread (12 instructions each), best of `repeats`.
FmaPeak measure_fma_peak(bool bf16, int threads, int64_t iters, int repeats);

struct ClockReading {
  double measured_ghz = 0.0;  // a chain of dependent 3-cycle multiplies, per second of the thread's CPU time
  double cpuinfo_mhz = 0.0;   // /proc/cpuinfo's "cpu MHz" of the first core (0: none)
};
ClockReading read_clock();

}  // namespace occ::kernels
