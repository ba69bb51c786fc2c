// The tensor-core attention kernels (kernels/cuda/tc_attention.h) against
// their simple twin, the CPU attention (kernels::attention_forward/backward):
// random q, k, v and dout are rounded to bf16 (or fp16); the CPU runs on the
// rounded fp32 values, the GPU on 16-bit copies of the same values.
//
// Tolerance: max |gpu - cpu| <= tol * max |cpu| per output, with tol = 1e-2
// for out and 2e-2 for dq, dk, dv in bf16 (4e-3 / 8e-3 in fp16). The inputs are
// exact in both runs, so the differences are the kernels' deliberate roundings:
// P rounded to 16 bits for P V (relative 2^-9 in bf16, 2^-12 in fp16), dS
// rounded for dS K and dS^T Q, Delta = rowsum(dout o out) from the 16-bit out,
// and one rounding of each output. A PyTorch model of exactly these roundings
// against fp64 attention (run when this test was written: the shapes below,
// inputs in [-2, 2], 3 draws each) gave at most 0.4% (out) and 1.1%
// (gradients) in bf16, 0.05% / 0.11% in fp16; the tolerances leave 2-4x
// margin, while a wrong fragment, mask bit or tile range errs by O(1).
// Gradients are measured against the largest of dq, dk, dv when one part is
// (nearly) zero: with T = 1 the softmax over one key has no gradient, and the
// kernels' Delta from the rounded out leaves ~1e-3 there.
//
// Dropout masks must be bit-identical to the CPU's, which value tolerances
// cannot prove, so probes read the masks out exactly (one-hot inputs turn
// out, dV, dQ and dK into P o M in some coordinates; see below). Without a
// visible GPU every GPU test is SKIPPED; the host-side tests (argument checks,
// the 16-bit conversion) run everywhere.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/error.h"
#include "core/precision.h"
#include "kernels/cuda/tc_attention.h"
#include "kernels/kernels.h"
#include "cuda_twin.h"
#include "sixteen_bit.h"

namespace occ::kernels {
namespace {

using cuda::tc_attention_backward;
using cuda::tc_attention_backward_scratch_bytes;
using cuda::tc_attention_forward;
using cuda::tc_attention_stats_floats;
using cuda::tc_attention_supported;

std::string tag_of(const AttentionShape& s, const Dropout& d, Precision f) {
  return std::string(" ") + precision_name(f) + " B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) +
         " H=" + std::to_string(s.H) + " KV=" + std::to_string(s.kv_heads()) + " D=" + std::to_string(s.D) +
         " head0=" + std::to_string(s.head0) +
         " p=" + std::to_string(d.p);
}

// One forward + backward on the GPU. out_for_backward replaces forward's out
// as backward's `out` (the dS probe); buffers are pre-filled with NaN so that
// an element a kernel fails to write shows up.
struct GpuRun {
  std::vector<uint16_t> out, dqkv;
  std::vector<float> lse;
};
GpuRun run_gpu(const AttentionShape& s, const Dropout& d, Precision f, const std::vector<float>& qkv,
               const std::vector<float>& dout, const std::vector<float>* out_for_backward = nullptr) {
  const size_t n_out = size_t(s.B * s.T * s.H * s.D), n_qkv = size_t(s.B * s.T * s.qkv_width());
  const uint16_t nan16 = 0xffff;  // NaN in bf16 and fp16
  DeviceBuffer<uint16_t> g_qkv(Device::Cuda), g_dout(Device::Cuda), g_out(Device::Cuda), g_dqkv(Device::Cuda);
  g_qkv.assign_from_host(to_16bit(qkv, f));
  g_dout.assign_from_host(to_16bit(dout, f));
  g_out.assign_from_host(std::vector<uint16_t>(n_out, nan16));
  g_dqkv.assign_from_host(std::vector<uint16_t>(n_qkv, nan16));
  DeviceBuffer<float> g_lse(Device::Cuda, size_t(tc_attention_stats_floats(s)));
  DeviceBuffer<uint8_t> scratch(Device::Cuda, tc_attention_backward_scratch_bytes(s));
  tc_attention_forward(g_out.data(), g_lse.data(), g_qkv.data(), s, d, f, nullptr);
  DeviceBuffer<uint16_t> g_fake_out(Device::Cuda);
  const void* out_arg = g_out.data();
  if (out_for_backward) {
    g_fake_out.assign_from_host(to_16bit(*out_for_backward, f));
    out_arg = g_fake_out.data();
  }
  tc_attention_backward(g_dqkv.data(), g_dout.data(), g_qkv.data(), out_arg, g_lse.data(), scratch.data(), s, d, f,
                        nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return GpuRun{g_out.to_host(), g_dqkv.to_host(), g_lse.to_host()};
}

// The CPU twin on the same (rounded) values, and the log-sum-exp in double.
struct CpuRun {
  std::vector<float> out, dqkv, dropped;
  std::vector<double> lse;
};
CpuRun run_cpu(const AttentionShape& s, const Dropout& d, const std::vector<float>& qkv,
               const std::vector<float>& dout) {
  const int64_t B = s.B, T = s.T, H = s.H, D = s.D, ld = s.qkv_width();
  CpuRun r;
  r.out.resize(size_t(B * T * H * D));
  r.dqkv.resize(size_t(B * T * ld));
  std::vector<float> probs(size_t(B * H * T * T));
  r.dropped.resize(probs.size());
  attention_forward(r.out.data(), probs.data(), r.dropped.data(), qkv.data(), s, d);
  attention_backward(r.dqkv.data(), dout.data(), qkv.data(), probs.data(), r.dropped.data(), s, d);
  if (!d.active()) r.dropped = probs;
  const double scale = 1.0 / std::sqrt(double(D));
  r.lse.resize(size_t(B * H * T));
  std::vector<double> scores(static_cast<size_t>(T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t tq = 0; tq < T; ++tq) {
        const float* q = qkv.data() + (b * T + tq) * ld + s.q_offset(h);
        double mx = -INFINITY;
        for (int64_t tk = 0; tk <= tq; ++tk) {
          const float* k = qkv.data() + (b * T + tk) * ld + s.k_offset(s.group_of(h));
          double dot = 0.0;
          for (int64_t c = 0; c < D; ++c) dot += double(q[c]) * double(k[c]);
          scores[size_t(tk)] = dot * scale;
          mx = std::max(mx, scores[size_t(tk)]);
        }
        double sum = 0.0;
        for (int64_t tk = 0; tk <= tq; ++tk) sum += std::exp(scores[size_t(tk)] - mx);
        r.lse[size_t((b * H + h) * T + tq)] = mx + std::log(sum);
      }
  return r;
}

// Part `part` (0: q, 1: k, 2: v) of a [B*T, s.qkv_width()] gradient, as [B*T, heads*D]
// (heads: H for q, the k/v heads for k and v).
std::vector<float> qkv_part(const std::vector<float>& x, const AttentionShape& s, int part) {
  const int64_t heads = part == 0 ? s.H : s.kv_heads();
  std::vector<float> y(size_t(s.B * s.T * heads * s.D));
  for (int64_t n = 0; n < s.B * s.T; ++n)
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t off = part == 0 ? s.q_offset(h) : part == 1 ? s.k_offset(h) : s.v_offset(h);
      for (int64_t c = 0; c < s.D; ++c)
        y[size_t((n * heads + h) * s.D + c)] = x[size_t(n * s.qkv_width() + off + c)];
    }
  return y;
}
double max_abs(const std::vector<float>& v) {
  double m = 0.0;
  for (float x : v) m = std::max(m, std::fabs(double(x)));
  return m;
}

void compare_with_cpu(const AttentionShape& s, const Dropout& d, Precision f) {
  const std::string tag = tag_of(s, d, f);
  const size_t n_out = size_t(s.B * s.T * s.H * s.D);
  const uint64_t seed = uint64_t(s.T * 1000 + s.D * 10 + (d.active() ? 1 : 0));
  const std::vector<float> qkv =
      rounded(random_values(size_t(s.B * s.T * s.qkv_width()), seed + uint64_t(s.kv_heads()), -2.0f, 2.0f), f);
  const std::vector<float> dout = rounded(random_values(n_out, seed + 1), f);
  const CpuRun cpu = run_cpu(s, d, qkv, dout);
  const GpuRun gpu = run_gpu(s, d, f, qkv, dout);
  const bool bf16 = f == Precision::Bf16;
  const double tol_out = bf16 ? 1e-2 : 4e-3, tol_grad = bf16 ? 2e-2 : 8e-3;

  expect_close(from_16bit(gpu.out, f), cpu.out, tol_out, "out" + tag);
  double lse_err = 0.0;
  for (size_t i = 0; i < cpu.lse.size(); ++i) lse_err = std::max(lse_err, std::fabs(gpu.lse[i] - cpu.lse[i]));
  EXPECT_LE(lse_err, 1e-3) << "lse" + tag;  // fp32 sums of exact products: ~1e-6 expected

  const std::vector<float> g = from_16bit(gpu.dqkv, f);
  const double largest = max_abs(cpu.dqkv);
  const char* names[] = {"dq", "dk", "dv"};
  for (int part = 0; part < 3; ++part) {
    const std::vector<float> ref = qkv_part(cpu.dqkv, s, part), got = qkv_part(g, s, part);
    // expect_close's scale is max|ref|; floor it at a quarter of the largest gradient (see the top).
    const double scale = std::max(max_abs(ref), 0.25 * largest);
    double worst = 0.0;
    size_t non_finite = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      if (!std::isfinite(got[i])) ++non_finite;
      else worst = std::max(worst, std::fabs(double(got[i]) - double(ref[i])));
    }
    EXPECT_EQ(non_finite, 0u) << names[part] << tag << ": elements not written or not finite";
    EXPECT_LE(worst, tol_grad * scale) << names[part] << tag << ": max |gpu - cpu| = " << worst << ", scale " << scale;
  }
}

TEST_F(CudaOpsTest, TcAttentionMatchesCpuBf16) {
  // T from one token to several tiles and tails; B*H several; head0 != 0 moves the dropout streams.
  struct Case {
    int64_t B, T, H;
  };
  const Case cases[] = {{3, 1, 2}, {2, 7, 3}, {2, 64, 2}, {3, 100, 2}, {1, 257, 3}, {1, 1024, 2}};
  for (int64_t D : {64, 128})
    for (const Case& c : cases)
      for (float p : {0.0f, 0.1f}) {
        const AttentionShape s{c.B, c.T, c.H, D, 2, 8};
        compare_with_cpu(s, make_dropout(p, 0x77, 3), Precision::Bf16);
      }
}

TEST_F(CudaOpsTest, TcAttentionGroupedQueryHeadsMatchCpu) {
  // Several query heads per k/v head (dK, dV summed over the group), multi-query (one k/v head), tails.
  for (float p : {0.0f, 0.1f}) {
    compare_with_cpu(AttentionShape{2, 100, 4, 64, 2, 8, 2}, make_dropout(p, 0x79, 5), Precision::Bf16);
    compare_with_cpu(AttentionShape{1, 257, 3, 128, 0, 3, 1}, make_dropout(p, 0x7A, 2), Precision::Bf16);
    compare_with_cpu(AttentionShape{2, 65, 6, 64, 6, 12, 2}, make_dropout(p, 0x7B, 9), Precision::Fp16);
  }
}

TEST_F(CudaOpsTest, TcAttentionMatchesCpuFp16) {
  compare_with_cpu(AttentionShape{2, 257, 2, 64, 1, 4}, make_dropout(0.1f, 0x78, 11), Precision::Fp16);
  compare_with_cpu(AttentionShape{1, 100, 2, 128, 0, 2}, make_dropout(0.0f), Precision::Fp16);
}

// ---- dropout masks, read out exactly ------------------------------------------------------
// Window w covers tokens [w D, w D + D). With one-hot rows (token t -> feature t - w D):
//   forward probe: v one-hot in the window  => out[tq, c] = (P o M)[tq, w D + c];
//                  dout one-hot in the window => dV[tk, c] = (P o M)[w D + c, tk];
//   dS probe: q and k one-hot in the window, every v and dout row e_0, and backward
//             given out = 0 (so Delta = 0, dP = 1): dS = scale P o M, hence
//             dQ[tq, c] = scale dS[tq, w D + c], dK[tk, c] = scale dS[w D + c, tk].
// P > 0 at every visible element (scores are small), so each of these is zero
// exactly where the CPU dropped the element or the element is not visible.
std::vector<float> one_hot_rows(const AttentionShape& s, int part, int64_t window, const std::vector<float>& base,
                                bool qkv_layout) {
  std::vector<float> x = base;
  const int64_t stride = qkv_layout ? 3 * s.H * s.D : s.H * s.D;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = 0; t < s.T; ++t)
      for (int64_t h = 0; h < s.H; ++h) {
        float* row = x.data() + (b * s.T + t) * stride + h * (qkv_layout ? 3 * s.D : s.D) + part * s.D;
        for (int64_t c = 0; c < s.D; ++c) row[c] = (t - window * s.D == c) ? 1.0f : 0.0f;
      }
  return x;
}

// Expected pattern of a [B*T, H*D] probe: element (b, t, h, c) carries (P o M) at
// (t, w D + c) (by_row) or at (w D + c, t) (!by_row); 0 past T.
std::vector<float> expected_probe(const CpuRun& cpu, const AttentionShape& s, int64_t window, bool by_row) {
  std::vector<float> e(size_t(s.B * s.T * s.H * s.D), 0.0f);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = 0; t < s.T; ++t)
      for (int64_t h = 0; h < s.H; ++h)
        for (int64_t c = 0; c < s.D; ++c) {
          const int64_t other = window * s.D + c;
          if (other >= s.T) continue;
          const int64_t tq = by_row ? t : other, tk = by_row ? other : t;
          e[size_t(((b * s.T + t) * s.H + h) * s.D + c)] = cpu.dropped[size_t(((b * s.H + h) * s.T + tq) * s.T + tk)];
        }
  return e;
}

void probe_masks(const AttentionShape& s, Precision f) {
  const Dropout d = make_dropout(0.1f, 0x5EED, 7);
  const std::string tag = tag_of(s, d, f);
  const size_t n_out = size_t(s.B * s.T * s.H * s.D);
  const std::vector<float> qk = rounded(random_values(3 * n_out, 90, -1.0f, 1.0f), f);
  const std::vector<float> zeros(n_out, 0.0f), ones_e0 = [&] {
    std::vector<float> x(n_out, 0.0f);
    for (size_t i = 0; i < n_out; i += size_t(s.D)) x[i] = 1.0f;
    return x;
  }();
  // The CPU's dropped probabilities (zero exactly where dropped or not visible).
  const CpuRun cpu = run_cpu(s, d, std::vector<float>(3 * n_out, 0.0f), zeros);
  for (int64_t w = 0; w * s.D < s.T; ++w) {
    const std::string wt = tag + " window " + std::to_string(w);
    {  // forward probe: out and dV
      const std::vector<float> qkv = one_hot_rows(s, 2, w, qk, true);
      const std::vector<float> dout = one_hot_rows(s, 0, w, zeros, false);
      const GpuRun gpu = run_gpu(s, d, f, qkv, dout);
      expect_same_zeros(from_16bit(gpu.out, f), expected_probe(cpu, s, w, true), "out mask" + wt);
      expect_same_zeros(qkv_part(from_16bit(gpu.dqkv, f), s, 2), expected_probe(cpu, s, w, false), "dV mask" + wt);
    }
    {  // dS probe: dQ and dK
      std::vector<float> qkv = one_hot_rows(s, 0, w, qk, true);
      qkv = one_hot_rows(s, 1, w, qkv, true);
      for (size_t n = 0; n < size_t(s.B * s.T); ++n)
        for (int64_t h = 0; h < s.H; ++h) {
          float* v = qkv.data() + n * size_t(3 * s.H * s.D) + size_t(h * 3 * s.D + 2 * s.D);
          for (int64_t c = 0; c < s.D; ++c) v[c] = c == 0 ? 1.0f : 0.0f;
        }
      const GpuRun gpu = run_gpu(s, d, f, qkv, ones_e0, &zeros);
      const std::vector<float> g = from_16bit(gpu.dqkv, f);
      expect_same_zeros(qkv_part(g, s, 0), expected_probe(cpu, s, w, true), "dQ mask" + wt);
      expect_same_zeros(qkv_part(g, s, 1), expected_probe(cpu, s, w, false), "dK mask" + wt);
    }
  }
}

TEST_F(CudaOpsTest, TcAttentionDropoutMasksAreTheCpus) {
  probe_masks(AttentionShape{2, 100, 2, 64, 3, 8}, Precision::Bf16);
  probe_masks(AttentionShape{1, 257, 2, 128, 1, 4}, Precision::Bf16);
  probe_masks(AttentionShape{1, 1024, 1, 64, 5, 8}, Precision::Bf16);
  probe_masks(AttentionShape{1, 130, 1, 64, 0, 1}, Precision::Fp16);
}

TEST_F(CudaOpsTest, TcAttentionRepeatsBitForBit) {
  for (float p : {0.0f, 0.1f}) {
    const AttentionShape s{2, 300, 3, 64, 1, 4};
    const Dropout d = make_dropout(p, 0x99, 2);
    const size_t n_out = size_t(s.B * s.T * s.H * s.D);
    const std::vector<float> qkv = rounded(random_values(3 * n_out, 5, -2.0f, 2.0f), Precision::Bf16);
    const std::vector<float> dout = rounded(random_values(n_out, 6), Precision::Bf16);
    const GpuRun first = run_gpu(s, d, Precision::Bf16, qkv, dout);
    const GpuRun second = run_gpu(s, d, Precision::Bf16, qkv, dout);
    EXPECT_EQ(first.out, second.out) << "p=" << p;
    EXPECT_EQ(first.dqkv, second.dqkv) << "p=" << p;
    EXPECT_EQ(std::memcmp(first.lse.data(), second.lse.data(), first.lse.size() * sizeof(float)), 0) << "p=" << p;
  }
}

// ---- host side (no GPU needed) ------------------------------------------------------------
TEST(TcAttentionHost, SupportedShapes) {
  EXPECT_TRUE(tc_attention_supported(AttentionShape{1, 1, 1, 64}));
  EXPECT_TRUE(tc_attention_supported(AttentionShape{4, 1024, 12, 64, 12, 24}));
  EXPECT_TRUE(tc_attention_supported(AttentionShape{2, 257, 3, 128}));
  EXPECT_FALSE(tc_attention_supported(AttentionShape{1, 16, 1, 32}));
  EXPECT_FALSE(tc_attention_supported(AttentionShape{1, 16, 1, 80}));
  EXPECT_FALSE(tc_attention_supported(AttentionShape{1, 0, 1, 64}));
  EXPECT_FALSE(tc_attention_supported(AttentionShape{0, 16, 1, 64}));
  EXPECT_FALSE(tc_attention_supported(AttentionShape{1, 16, 0, 64}));
  EXPECT_FALSE(tc_attention_supported(AttentionShape{1, (int64_t(1) << 22) + 1, 1, 64}));
  EXPECT_EQ(tc_attention_stats_floats(AttentionShape{2, 5, 3, 64}), 30);
  EXPECT_GE(tc_attention_backward_scratch_bytes(AttentionShape{2, 5, 3, 64}), 30 * sizeof(float));
}

TEST(TcAttentionHost, BadCallsThrowBeforeLaunching) {
  // Checked on the host before anything touches the device, so fake pointers do.
  void* aligned = reinterpret_cast<void*>(uintptr_t(0x10000));
  void* misaligned = reinterpret_cast<void*>(uintptr_t(0x10008));
  float* lse = reinterpret_cast<float*>(uintptr_t(0x20000));
  const AttentionShape ok{1, 8, 1, 64};
  EXPECT_THROW(tc_attention_forward(aligned, lse, aligned, AttentionShape{1, 8, 1, 96}, Dropout{}, Precision::Bf16,
                                    nullptr),
               Error);
  EXPECT_THROW(tc_attention_forward(aligned, lse, aligned, ok, Dropout{}, Precision::Fp32, nullptr), Error);
  EXPECT_THROW(tc_attention_forward(aligned, lse, misaligned, ok, Dropout{}, Precision::Bf16, nullptr), Error);
  EXPECT_THROW(tc_attention_forward(aligned, lse, aligned, ok, make_dropout(1.0f), Precision::Bf16, nullptr), Error);
  EXPECT_THROW(tc_attention_backward(aligned, aligned, aligned, aligned, lse, aligned, ok, Dropout{}, Precision::Bf16,
                                     nullptr),
               Error);  // dqkv aliases its inputs
  EXPECT_THROW(tc_attention_backward(misaligned, aligned, aligned, aligned, lse, aligned, ok, Dropout{},
                                     Precision::Fp16, nullptr),
               Error);
}

TEST(SixteenBit, ConversionRoundsLikePrecisionH) {
  for (Precision f : {Precision::Bf16, Precision::Fp16}) {
    const std::vector<float> x = random_values(4096, 3, -70000.0f, 70000.0f);
    const std::vector<float> small = random_values(4096, 4, -1e-5f, 1e-5f);  // fp16 subnormals
    for (const auto* v : {&x, &small}) {
      const std::vector<float> back = from_16bit(to_16bit(*v, f), f);
      for (size_t i = 0; i < v->size(); ++i) {
        const float r = round_to(f, (*v)[i]);
        ASSERT_TRUE(back[i] == r || (std::isnan(back[i]) && std::isnan(r))) << precision_name(f) << " " << (*v)[i];
      }
    }
  }
  EXPECT_EQ(to_16bit(1.0f, Precision::Bf16), 0x3f80);
  EXPECT_EQ(to_16bit(1.0f, Precision::Fp16), 0x3c00);
  EXPECT_EQ(to_16bit(65504.0f, Precision::Fp16), 0x7bff);
  EXPECT_EQ(to_16bit(65520.0f, Precision::Fp16), 0x7c00);           // overflows to infinity
  EXPECT_EQ(to_16bit(std::ldexp(1.0f, -24), Precision::Fp16), 0x0001);  // smallest subnormal
  EXPECT_EQ(to_16bit(-std::ldexp(1.0f, -14), Precision::Fp16), 0x8400);  // smallest normal
  EXPECT_EQ(from_16bit(0x03ff, Precision::Fp16), 1023.0f * std::ldexp(1.0f, -24));
}

}  // namespace
}  // namespace occ::kernels
