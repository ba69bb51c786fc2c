#pragma once
// What the CUDA twin tests share: inputs from fixed seeds, a tensor held on the
// host (for the CPU reference) and on the GPU, the agreement check, and the
// fixture that skips every test where no GPU is visible.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/buffer.h"
#include "core/precision.h"
#include "core/rng.h"
#include "core/tensor_buffer.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"

namespace occ::kernels {

inline std::string no_gpu_reason() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
  }
  return count == 0 ? "cudaGetDeviceCount() found 0 devices" : "";
}

// Uniform values in [lo, hi) from a counter-based stream: fixed by the seed.
inline std::vector<float> random_values(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * (uniform_at(seed, 7, i) - 0.5f / 16777216.0f);
  return v;
}
inline std::vector<int32_t> random_ints(size_t n, uint64_t seed, int32_t lo, int32_t hi) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = lo + std::min(int32_t(uniform_at(seed, 9, i) * float(hi - lo)), hi - lo - 1);
  return v;
}

inline std::vector<float> filled(int64_t n, float value = 0.0f) { return std::vector<float>(size_t(n), value); }

// A tensor held twice: on the host for the CPU backend and on the GPU.
template <class T>
struct Twin {
  std::vector<T> cpu;
  DeviceBuffer<T> dev{Device::Cuda};
  explicit Twin(std::vector<T> values) : cpu(std::move(values)) { dev.assign_from_host(cpu); }
  T* c() { return cpu.data(); }
  T* g() { return dev.data(); }
  std::vector<T> gpu() const { return dev.to_host(); }
};
using FTwin = Twin<float>;
using ITwin = Twin<int32_t>;

inline void expect_close(const std::vector<float>& gpu, const std::vector<float>& cpu, double tol, const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  double max_diff = 0.0, max_ref = 0.0;
  size_t worst = 0, non_finite = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (!std::isfinite(gpu[i]) || !std::isfinite(cpu[i])) {
      non_finite += (std::isfinite(gpu[i]) != std::isfinite(cpu[i]));
      continue;
    }
    const double diff = std::fabs(double(gpu[i]) - double(cpu[i]));
    if (diff > max_diff) max_diff = diff, worst = i;
    max_ref = std::max(max_ref, std::fabs(double(cpu[i])));
  }
  EXPECT_EQ(non_finite, 0u) << what << ": elements finite on one backend only";
  EXPECT_LE(max_diff, tol * std::max(max_ref, 1e-30))
      << what << ": max |gpu - cpu| = " << max_diff << " at " << worst << " (gpu " << gpu[worst] << ", cpu "
      << cpu[worst] << "), max |cpu| = " << max_ref;
}
inline void expect_close(FTwin& t, double tol, const std::string& what) { expect_close(t.gpu(), t.cpu, tol, what); }

// ---- 16-bit storage ------------------------------------------------------------------------
// The values of precision p nearest to v (core/precision.h): what the CPU
// reference stores in a --bf16 / --fp16 step.
inline std::vector<float> round_values(std::vector<float> v, Precision p) {
  for (float& x : v) x = round_to(p, x);
  return v;
}

// A tensor held twice: on the host as fp32 values of precision p (the CPU
// reference's storage) and on the GPU stored in `storage` (p's own 16 bits, or
// fp32 holding the same values).
struct StoredTwin {
  std::vector<float> cpu;
  TensorBuffer dev;
  StoredTwin(std::vector<float> values, Precision p, Precision storage)
      : cpu(round_values(std::move(values), p)), dev(Device::Cuda, storage) {
    dev.assign_from_host_f32(cpu);
  }
  StoredTwin(std::vector<float> values, Precision p) : StoredTwin(std::move(values), p, p) {}
  float* c() { return cpu.data(); }
  TensorRef g() { return dev.ref(); }
  std::vector<float> gpu() const { return dev.to_host_f32(); }
};

// One unit in the last place of precision p at magnitude a (fp16: at least its
// smallest subnormal).
inline double ulp_of(Precision p, double a) {
  const int mantissa = p == Precision::Bf16 ? 7 : p == Precision::Fp16 ? 10 : 23;
  const int e = a > 0 ? std::ilogb(a) : -126;
  const double u = std::ldexp(1.0, std::max(e, -126) - mantissa);
  return p == Precision::Fp16 ? std::max(u, std::ldexp(1.0, -24)) : u;
}

// Agreement of values stored in precision p: |gpu - cpu| <= ulps units in the
// last place of p (at the larger magnitude) + rel * max|cpu|. Values computed
// from the same inputs in fp32 (up to summation order) and rounded once differ
// by at most one unit where the fp32 results straddle a rounding boundary.
inline void expect_close_lp(const std::vector<float>& gpu, const std::vector<float>& cpu, Precision p, double ulps,
                            double rel, const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  double max_ref = 0.0;
  for (float c : cpu)
    if (std::isfinite(c)) max_ref = std::max(max_ref, std::fabs(double(c)));
  size_t bad = 0, worst = 0, non_finite = 0;
  double worst_excess = 0.0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (!std::isfinite(gpu[i]) || !std::isfinite(cpu[i])) {
      non_finite += (std::isfinite(gpu[i]) != std::isfinite(cpu[i]));
      continue;
    }
    const double diff = std::fabs(double(gpu[i]) - double(cpu[i]));
    const double allowed =
        ulps * ulp_of(p, std::max(std::fabs(double(gpu[i])), std::fabs(double(cpu[i])))) + rel * max_ref;
    if (diff > allowed) {
      ++bad;
      if (diff - allowed > worst_excess) worst_excess = diff - allowed, worst = i;
    }
  }
  EXPECT_EQ(non_finite, 0u) << what << ": elements finite on one backend only";
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " elements beyond " << ulps << " ulp(s) of " << precision_name(p)
                     << " + " << rel << " * max|cpu|; worst at " << worst << " (gpu " << gpu[worst] << ", cpu "
                     << cpu[worst] << ")";
}

// Dropout masks: the same elements must be zero on both backends. require_zeros:
// the case is large enough that some element must have been dropped (a tiny
// case, e.g. attention with T = 1, may keep everything by chance).
inline void expect_same_zeros(const std::vector<float>& gpu, const std::vector<float>& cpu, const std::string& what,
                       bool require_zeros = true) {
  ASSERT_EQ(gpu.size(), cpu.size());
  size_t mismatches = 0, zeros = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    mismatches += (gpu[i] == 0.0f) != (cpu[i] == 0.0f);
    zeros += cpu[i] == 0.0f;
  }
  EXPECT_EQ(mismatches, 0u) << what << ": zero patterns differ (" << zeros << " zeros on the CPU)";
  if (require_zeros) {
    EXPECT_GT(zeros, 0u) << what << ": no element was dropped; the test checks nothing";
  }
}

// What a loss op adds into a device double starting from 0.5 (so that "+=" is
// checked too), minus 0.5, read back on the host.
template <class F>
double loss_sum(Ops& ops, F&& op) {
  DeviceBuffer<double> sum(ops.device());
  sum.assign_from_host({0.5});
  op(sum.data());
  return ops.read_double(sum.data()) - 0.5;
}

inline Dropout make_dropout(float p, uint64_t key = 0x5EED, int64_t sample_base = 5) {
  Dropout d;
  d.key = key;
  d.p = p;
  d.sample_base = sample_base;
  return d;
}

class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static const std::string reason = no_gpu_reason();
    if (!reason.empty()) GTEST_SKIP() << "no CUDA GPU visible: " << reason;
  }
  Ops& cpu() { return cpu_ops(); }
  Ops& gpu() { return cuda_ops(); }
};

}  // namespace occ::kernels
