// The cuBLASLt linear layers (kernels/cuda/lt_matmul.h) against the CPU kernels
// (kernels/kernels.h, fp32 cblas) on the same bf16- or fp16-valued inputs.
//
// Tolerances. The GPU sums the same exact products as the CPU in another order,
// so an fp32 result agrees to e = 1e-5 max|ref| (as the fp32 twin tests). A
// 16-bit output is the fp32 result rounded once; rounding two fp32 values that
// are e apart gives values at most e + one ulp of the format apart, so a 16-bit
// element must be within e + 1 ulp of the rounded CPU result, and nearly all
// (>= 97%) must be bit-equal (they differ only where e straddles a rounding
// boundary). GeLU: cuBLASLt's GELU epilogues are the tanh approximation, like
// kernels/elementwise.cpp, but their tanh is the library's own (possibly a
// hardware approximation, ~2^-11 relative): the GeLU allowance below
// (5e-4 (1 + |x|) for GeLU, 5e-3 |dout w| for its gradient with |x| <= 3;
// a tanh off by 2^-11 moves them by at most 2.5e-4 |x| and 2.3e-3 |dout w|)
// bounds that, and the fp32 cases print the measured difference. A 16-bit GeLU
// output may come from the rounded pre-activation: one more half ulp of x.
//
// Every case prints whether its epilogue ran fused or fell back (and why); the
// cases the model's step uses (ModelEpiloguesRunFused: BIAS, GELU_AUX_BIAS,
// DGELU_BGRAD with the bias gradient in D's type, BGRADB, at GPT-2 small and
// medium shapes, bf16 and fp16) must fuse, and a GeLU with an aux ld that is not
// a multiple of 8 must fall back. Without a visible GPU every test is SKIPPED.
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/error.h"
#include "core/precision.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/lt_matmul.h"
#include "kernels/kernels.h"
#include "cuda_twin.h"

namespace occ::kernels {
namespace {

using cuda::LtEpilogue;
using cuda::LtMatmul;
constexpr Precision kFp32 = Precision::Fp32, kBf16 = Precision::Bf16, kFp16 = Precision::Fp16;

uint16_t bits16(float x, Precision f) {  // x: a value of the format
  if (f == kBf16) return uint16_t(float_bits(x) >> 16);
  return static_cast<__half_raw>(__float2half_rn(x)).x;
}
float value16(uint16_t b, Precision f) {
  if (f == kBf16) return bits_float(uint32_t(b) << 16);
  __half_raw r;
  r.x = b;
  return __half2float(__half(r));
}

// A device tensor in one format, and the exact values it holds. `offset`
// elements before it: a pointer aligned to its element size only.
class DevTensor {
 public:
  DevTensor(std::vector<float> values, Precision f, size_t offset = 0) : format_(f), offset_(offset) {
    for (float& v : values) v = round_to(f, v);
    host_ = std::move(values);
    upload();
  }
  void* g() { return format_ == kFp32 ? static_cast<void*>(f32_.data() + offset_) : b16_.data() + offset_; }
  float* gf() { return f32_.data() + offset_; }  // fp32 tensors
  const std::vector<float>& host() const { return host_; }
  const float* h() const { return host_.data(); }
  std::vector<float> download() const {
    std::vector<float> v(host_.size());
    if (format_ == kFp32) {
      f32_.copy_to_host(v.data(), v.size(), offset_);
    } else {
      std::vector<uint16_t> b(host_.size());
      b16_.copy_to_host(b.data(), b.size(), offset_);
      for (size_t i = 0; i < b.size(); ++i) v[i] = value16(b[i], format_);
    }
    return v;
  }
  void upload() {
    if (format_ == kFp32) {
      f32_.resize(host_.size() + offset_);
      f32_.copy_from_host(host_.data(), host_.size(), offset_);
    } else {
      std::vector<uint16_t> b(host_.size());
      for (size_t i = 0; i < b.size(); ++i) b[i] = bits16(host_[i], format_);
      b16_.resize(host_.size() + offset_);
      b16_.copy_from_host(b.data(), b.size(), offset_);
    }
  }

 private:
  Precision format_;
  size_t offset_;
  std::vector<float> host_;
  DeviceBuffer<float> f32_{Device::Cuda};
  DeviceBuffer<uint16_t> b16_{Device::Cuda};
};

std::vector<float> scaled(std::vector<float> v, float s) {
  for (float& x : v) x *= s;
  return v;
}
double max_abs(const std::vector<float>& v) {
  double m = 0.0;
  for (float x : v) m = std::max(m, std::fabs(double(x)));
  return m;
}
std::vector<float> rounded_to(std::vector<float> v, Precision f) {
  for (float& x : v) x = round_to(f, x);
  return v;
}
// One unit in the last place of the format at |v| (0 for fp32, whose rounding the bounds include).
double ulp(double v, Precision f) {
  if (f == kFp32 || v == 0.0) return 0.0;
  int e = 0;
  std::frexp(v, &e);  // |v| = m 2^e, m in [0.5, 1)
  const double u = std::ldexp(1.0, e - 1 - (f == kBf16 ? 7 : 10));
  return f == kFp16 ? std::max(u, std::ldexp(1.0, -24)) : u;
}

// |gpu[i] - ref[i]| <= bound(i) for every i, and at least min_exact of them equal.
void expect_within(const std::vector<float>& gpu, const std::vector<float>& ref,
                   const std::function<double(size_t)>& bound, const std::string& what, double min_exact = 0.0) {
  ASSERT_EQ(gpu.size(), ref.size()) << what;
  size_t bad = 0, worst = 0, exact = 0;
  double worst_ratio = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double diff = std::fabs(double(gpu[i]) - double(ref[i])), b = bound(i);
    exact += gpu[i] == ref[i];
    if (!(diff <= b)) ++bad;
    const double ratio = diff / std::max(b, 1e-300);
    if (!(ratio <= worst_ratio)) worst_ratio = ratio, worst = i;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << ref.size() << " elements outside their bound; worst at "
                     << worst << " (gpu " << gpu[worst] << ", ref " << ref[worst] << ", bound " << bound(worst) << ")";
  EXPECT_GE(double(exact), min_exact * double(ref.size())) << what << ": only " << exact << " of " << ref.size()
                                                           << " elements bit-equal";
}

// A 16-bit (or fp32) output against the CPU's fp32 result `cpu`, rounded to the format.
void expect_output(const std::vector<float>& gpu, const std::vector<float>& cpu, Precision f, const std::string& what,
                   const std::function<double(size_t)>& extra = nullptr) {
  const double e = 1e-5 * std::max(max_abs(cpu), 1e-30);
  const std::vector<float> ref = rounded_to(cpu, f);
  expect_within(
      gpu, ref,
      [&](size_t i) {
        return e + (extra ? extra(i) : 0.0) + ulp(std::max(std::fabs(gpu[i]), std::fabs(ref[i])), f);
      },
      what, f == kFp32 || extra ? 0.0 : 0.97);
}

void report(const LtMatmul& lt, const std::string& what) {
  const auto& c = lt.last_call();
  std::printf("[ lt       ] %-58s %s %s%s\n", what.c_str(), cuda::epilogue_name(c.epilogue),
              c.fused ? "fused" : "fallback: ", c.fused ? "" : c.fallback_reason.c_str());
}

class LtMatmulTest : public CudaOpsTest {
 protected:
  static cuda::CudaOps& backend() {
    static auto* ops = new cuda::CudaOps(CudaAttention::Fused);  // never destroyed, like cuda_ops()
    return *ops;
  }
  static LtMatmul& lt() {
    static auto* instance = new LtMatmul(backend());
    return *instance;
  }
};

std::string shape_name(int64_t N, int64_t C, int64_t OC) {
  return std::to_string(N) + "x" + std::to_string(C) + "x" + std::to_string(OC);
}
// Model-like shapes (GPT-2 small at a few sequences) and odd ones.
const int64_t kShapes[][3] = {{37, 50, 29}, {1, 7, 300}, {512, 768, 2304}};

// Weights scaled so that pre-activations are O(1): GeLU's curved region.
DevTensor weights(int64_t OC, int64_t C, Precision f, uint64_t seed) {
  return DevTensor(scaled(random_values(size_t(OC * C), seed), 1.5f / std::sqrt(float(C))), f);
}

// ---- forward --------------------------------------------------------------------

// out = inp w^T (+ bias); with `gelu`, pre_gelu = that and out = gelu(that).
void check_forward(LtMatmul& lt, int64_t N, int64_t C, int64_t OC, Precision ops, Precision out_f, bool with_bias,
                   Precision bias_f, bool gelu) {
  const std::string what = "forward " + shape_name(N, C, OC) + " " + precision_name(ops) + " out " +
                           precision_name(out_f) + (with_bias ? std::string(" bias ") + precision_name(bias_f) : "") +
                           (gelu ? " gelu" : "");
  DevTensor inp(random_values(size_t(N * C), 10), ops), w = weights(OC, C, ops, 11);
  DevTensor bias(random_values(size_t(OC), 12), bias_f);
  DevTensor out(filled(N * OC, 9.0f), out_f), pre(filled(N * OC, 9.0f), out_f);
  cuda::LinearForwardArgs a;
  a.out = out.g(), a.out_format = out_f, a.inp = inp.g(), a.w = w.g();
  a.bias = with_bias ? bias.g() : nullptr, a.bias_format = bias_f;
  a.pre_gelu = gelu ? pre.g() : nullptr;
  a.N = N, a.C = C, a.OC = OC, a.operands = ops;
  lt.linear_forward(a);
  report(lt, what);

  std::vector<float> ref(size_t(N * OC));
  linear_forward(ref.data(), inp.h(), w.h(), with_bias ? bias.h() : nullptr, N, C, OC);
  if (!gelu) {
    expect_output(out.download(), ref, out_f, what);
    return;
  }
  expect_output(pre.download(), ref, out_f, what + " pre_gelu");
  std::vector<float> gref(ref.size());
  gelu_forward(gref.data(), ref.data(), int64_t(ref.size()));
  // The pre-activation's own error e passes through GeLU (|gelu'| <= 1.13).
  const double e = 1e-5 * max_abs(ref);
  expect_output(out.download(), gref, out_f, what + " out", [&](size_t i) {
    const double x = std::fabs(ref[i]);
    return 1.13 * e + 5e-4 * (1.0 + x) + 0.57 * ulp(x, out_f);
  });
  if (out_f == kFp32) {  // the GeLU alone: the GPU's output against the CPU's GeLU of the GPU's pre-activation
    const std::vector<float> gpu_pre = pre.download(), gpu_out = out.download();
    std::vector<float> cpu_gelu(gpu_pre.size());
    gelu_forward(cpu_gelu.data(), gpu_pre.data(), int64_t(gpu_pre.size()));
    double max_diff = 0.0;
    for (size_t i = 0; i < cpu_gelu.size(); ++i)
      max_diff = std::max(max_diff, std::fabs(double(gpu_out[i]) - cpu_gelu[i]));
    std::printf("[ lt       ] %-58s GeLU vs kernels/elementwise.cpp: max |diff| %.3g\n", what.c_str(), max_diff);
    expect_within(gpu_out, cpu_gelu, [&](size_t i) { return 5e-4 * (1.0 + std::fabs(gpu_pre[i])); }, what + " GeLU");
  }
}

TEST_F(LtMatmulTest, Forward) {
  for (const auto& s : kShapes)
    for (Precision out_f : {kFp32, kBf16})
      for (int bias : {0, 1, 2})  // none, fp32, bf16
        check_forward(lt(), s[0], s[1], s[2], kBf16, out_f, bias > 0, bias == 2 ? kBf16 : kFp32, false);
  for (int bias : {1, 2}) check_forward(lt(), 512, 768, 2304, kFp16, kFp16, true, bias == 2 ? kFp16 : kFp32, false);
  check_forward(lt(), 37, 50, 29, kFp16, kFp32, true, kFp32, false);
  // llm.c's fused case: bf16 out, bf16 bias, aligned model shape.
  check_forward(lt(), 512, 768, 2304, kBf16, kBf16, true, kBf16, false);
  EXPECT_TRUE(lt().last_call().fused) << lt().last_call().fallback_reason;
}

TEST_F(LtMatmulTest, ForwardGeluKeepsThePreActivation) {
  for (Precision out_f : {kBf16, kFp32}) {
    for (int bias : {0, 1, 2}) {
      const Precision bias_f = bias == 2 ? out_f : kFp32;
      check_forward(lt(), 512, 768, 3072, kBf16, out_f, bias > 0, bias_f, true);
      if (out_f == kBf16 && bias == 2) {
        EXPECT_TRUE(lt().last_call().fused) << lt().last_call().fallback_reason;
      }
      check_forward(lt(), 37, 50, 29, kBf16, out_f, bias > 0, bias_f, true);  // aux ld 29: the kernel
      EXPECT_FALSE(lt().last_call().fused);
    }
  }
  check_forward(lt(), 512, 768, 3072, kFp16, kFp16, true, kFp16, true);
}

// A 16-bit operand at an odd element offset (2-byte aligned) still multiplies correctly.
TEST_F(LtMatmulTest, ForwardWithOperandsAlignedToTheirElementsOnly) {
  const int64_t N = 64, C = 96, OC = 40;
  DevTensor inp(random_values(size_t(N * C), 13), kBf16, 1), w = weights(OC, C, kBf16, 14);
  DevTensor out(filled(N * OC, 9.0f), kFp32, 1);
  cuda::LinearForwardArgs a;
  a.out = out.g(), a.out_format = kFp32, a.inp = inp.g(), a.w = w.g(), a.N = N, a.C = C, a.OC = OC;
  a.operands = kBf16;
  lt().linear_forward(a);
  std::vector<float> ref(size_t(N * OC));
  linear_forward(ref.data(), inp.h(), w.h(), nullptr, N, C, OC);
  expect_output(out.download(), ref, kFp32, "forward with 2-byte-aligned inp");
}

// ---- backward, input ------------------------------------------------------------

// dinp = dout w (+= old); with `gelu`, times gelu'(pre) and dbias_of_dinp += column sums.
void check_backward_input(LtMatmul& lt, int64_t N, int64_t C, int64_t OC, Precision ops, Precision dinp_f,
                          bool accumulate, bool gelu, bool dbias) {
  const std::string what = "backward input " + shape_name(N, C, OC) + " " + precision_name(ops) + " dinp " +
                           precision_name(dinp_f) + (accumulate ? " +=" : "") + (gelu ? " dgelu" : "") +
                           (dbias ? " bgrad" : "");
  DevTensor dout(random_values(size_t(N * OC), 20), ops), w = weights(OC, C, ops, 21);
  DevTensor dinp(random_values(size_t(N * C), 22), dinp_f), pre(random_values(size_t(N * C), 23, -3.0f, 3.0f), ops);
  DevTensor db(random_values(size_t(C), 24), kFp32);
  cuda::LinearBackwardInputArgs a;
  a.dinp = dinp.g(), a.dinp_format = dinp_f, a.dout = dout.g(), a.w = w.g(), a.accumulate = accumulate;
  a.pre_gelu = gelu ? pre.g() : nullptr, a.dbias_of_dinp = dbias ? db.gf() : nullptr;
  a.N = N, a.C = C, a.OC = OC, a.operands = ops;
  lt.linear_backward_input(a);
  report(lt, what);

  std::vector<float> prod(size_t(N * C)), g(size_t(N * C));
  linear_backward(prod.data(), nullptr, nullptr, dout.h(), nullptr, w.h(), N, C, OC);
  if (gelu)
    gelu_backward(g.data(), pre.h(), prod.data(), N * C);
  else
    g = prod;
  std::vector<float> ref = g;
  if (accumulate)
    for (size_t i = 0; i < ref.size(); ++i) ref[i] += dinp.host()[i];
  const double e = 1e-5 * max_abs(prod);
  // The GeLU gradient's allowance (|x| <= 3), and fp32's rounding of old + new.
  auto allowance = [&](size_t i) {
    return 0.2 * e + (gelu ? 5e-3 * std::fabs(prod[i]) : 0.0) + (accumulate ? 2e-7 * std::fabs(ref[i]) : 0.0);
  };
  const std::vector<float> got = dinp.download();
  expect_output(got, ref, dinp_f, what, gelu || accumulate ? std::function<double(size_t)>(allowance) : nullptr);
  if (gelu && dinp_f == kFp32) {  // the GeLU gradient's difference from kernels/elementwise.cpp's, relative to |dout w|
    double worst = 0.0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double diff = std::fabs(double(got[i]) - ref[i]) - 1.2 * e;
      worst = std::max(worst, diff / std::max(std::fabs(double(prod[i])), 1e-3));
    }
    std::printf("[ lt       ] %-58s GeLU' vs kernels/elementwise.cpp: max |diff| / |dout w| %.3g\n", what.c_str(),
                std::max(worst, 0.0));
  }
  if (!dbias) return;
  std::vector<float> want(db.host());
  // Per column: the sum, each element's own allowance (half an ulp where the sums see the
  // rounded output) and the magnitudes, accumulated row by row (the model's shapes are large).
  std::vector<double> sum(size_t(C), 0.0), allow(size_t(C), 0.0), mag(size_t(C), 0.0), bound(size_t(C), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const size_t i = size_t(n * C + c);
      sum[size_t(c)] += g[i];
      mag[size_t(c)] += std::fabs(g[i]);
      allow[size_t(c)] += 1.2 * e + allowance(i) + 0.5 * ulp(std::fabs(g[i]), dinp_f);
    }
  for (int64_t c = 0; c < C; ++c) {
    const size_t k = size_t(c);
    want[k] = float(double(want[k]) + sum[k]);
    // + the one rounding of the call's sum to dinp's format (DGELU_BGRAD writes its
    // vector in D's type) before it is widened and added to the fp32 gradient
    bound[k] = allow[k] + 1e-5 * mag[k] + 0.5 * ulp(std::fabs(sum[k]) + allow[k], dinp_f) + 1e-6 * std::fabs(want[k]);
  }
  expect_within(db.download(), want, [&](size_t c) { return bound[c]; }, what + " dbias_of_dinp");
}

TEST_F(LtMatmulTest, BackwardInput) {
  for (const auto& s : kShapes)
    for (Precision dinp_f : {kFp32, kBf16})
      for (bool accumulate : {false, true})
        check_backward_input(lt(), s[0], s[1], s[2], kBf16, dinp_f, accumulate, false, false);
  check_backward_input(lt(), 512, 768, 2304, kFp16, kFp16, true, false, false);
  check_backward_input(lt(), 37, 50, 29, kFp16, kFp32, false, false, false);
}

TEST_F(LtMatmulTest, BackwardInputThroughGelu) {
  for (Precision dinp_f : {kBf16, kFp32}) {
    for (bool dbias : {false, true}) {
      // The second MLP layer of GPT-2 small: dinp [N, 3072] through the GeLU of the first.
      check_backward_input(lt(), 512, 3072, 768, kBf16, dinp_f, false, true, dbias);
      if (dinp_f == kBf16) {  // DGELU and DGELU_BGRAD (the bias gradient in D's type) fuse
        EXPECT_TRUE(lt().last_call().fused) << lt().last_call().fallback_reason;
      }
      check_backward_input(lt(), 37, 50, 29, kBf16, dinp_f, false, true, dbias);  // aux ld 50: the kernel
      EXPECT_FALSE(lt().last_call().fused);
    }
  }
  // Accumulating through the GeLU gradient is never fused (beta C would pass through it).
  check_backward_input(lt(), 512, 3072, 768, kBf16, kBf16, true, true, true);
  EXPECT_FALSE(lt().last_call().fused);
  check_backward_input(lt(), 512, 3072, 768, kFp16, kFp16, false, true, true);
  EXPECT_TRUE(lt().last_call().fused) << lt().last_call().fallback_reason;
}

// ---- backward, weight -----------------------------------------------------------

// dw += dout^T inp and dbias += column sums of dout, over two calls.
void check_backward_weight(LtMatmul& lt, int64_t N, int64_t C, int64_t OC, Precision ops, bool dbias) {
  const std::string what = "backward weight " + shape_name(N, C, OC) + " " + precision_name(ops) +
                           (dbias ? " bgrad" : "");
  FTwin dw(random_values(size_t(OC * C), 30)), db(random_values(size_t(OC), 31));
  for (uint64_t call = 0; call < 2; ++call) {
    DevTensor dout(random_values(size_t(N * OC), 32 + call), ops), inp(random_values(size_t(N * C), 34 + call), ops);
    cuda::LinearBackwardWeightArgs a;
    a.dw = dw.g(), a.dbias = dbias ? db.g() : nullptr, a.dout = dout.g(), a.inp = inp.g();
    a.N = N, a.C = C, a.OC = OC, a.operands = ops;
    lt.linear_backward_weight(a);
    linear_backward(nullptr, dw.c(), dbias ? db.c() : nullptr, dout.h(), inp.h(), nullptr, N, C, OC);
  }
  report(lt, what);
  expect_close(dw, 1e-5, what + " dw");
  expect_close(db, 1e-5, what + " dbias");
}

TEST_F(LtMatmulTest, BackwardWeightAccumulates) {
  for (const auto& s : kShapes)
    for (bool dbias : {false, true}) check_backward_weight(lt(), s[0], s[1], s[2], kBf16, dbias);
  check_backward_weight(lt(), 512, 768, 2304, kFp16, true);
}

// ---- the epilogues of the model's step: fused, or FAIL ------------------------------
// A --bf16 / --fp16 GPT step (model/gpt_layer.cpp, model/block.cpp) asks cuBLASLt for
// these fused epilogues, with 16-bit activations and weights and fp32 gradients:
//   QKV forward                 BIAS           out and bias in the 16-bit format     [N, C] -> [N, 3C]
//   MLP h->4h forward           GELU_AUX_BIAS  out, pre-GeLU and bias 16-bit          [N, C] -> [N, 4C]
//   MLP 4h->h input gradient    DGELU_BGRAD    dinp 16-bit through the GeLU, fc's bias gradient
//                                              (its vector in dinp's format)          [N, C] -> [N, 4C]
//   QKV weight gradient         BGRADB         dw fp32 (+=), the QKV bias's gradient fp32
// and DEFAULT for every other product (the projections, the LM head, the other input and
// weight gradients; those bias gradients come from the fused dropout kernels). Here each
// case at GPT-2 small (C 768) and medium (C 1024) with N = 8 x 1024 rows (micro-batch 8,
// sequence 1024), in bf16 and fp16, against the CPU, and each must have run fused: a
// fallback costs every layer an extra GEMM into an fp32 [N, 4C] buffer and kernels.
struct ModelCase {
  const char* name;
  LtEpilogue epilogue;
};
constexpr ModelCase kModelCases[] = {{"QKV forward", LtEpilogue::Bias},
                                     {"MLP h->4h forward", LtEpilogue::GeluAuxBias},
                                     {"MLP 4h->h input gradient", LtEpilogue::DGeluBGrad},
                                     {"QKV weight gradient", LtEpilogue::BGradB}};

TEST_F(LtMatmulTest, ModelEpiloguesRunFused) {
  const int64_t N = 8 * 1024;
  for (auto [size, C] : {std::pair<const char*, int64_t>{"GPT-2 small", 768}, {"GPT-2 medium", 1024}}) {
    for (Precision f : {kBf16, kFp16}) {
      for (const ModelCase& m : kModelCases) {
        switch (m.epilogue) {
          case LtEpilogue::Bias: check_forward(lt(), N, C, 3 * C, f, f, true, f, false); break;
          case LtEpilogue::GeluAuxBias: check_forward(lt(), N, C, 4 * C, f, f, true, f, true); break;
          case LtEpilogue::DGeluBGrad: check_backward_input(lt(), N, 4 * C, C, f, f, false, true, true); break;
          case LtEpilogue::BGradB: check_backward_weight(lt(), N, C, 3 * C, f, true); break;
          default: break;
        }
        const auto& call = lt().last_call();
        EXPECT_EQ(call.epilogue, m.epilogue) << m.name;
        EXPECT_TRUE(call.fused) << size << " " << precision_name(f) << " " << m.name << " ("
                                << cuda::epilogue_name(m.epilogue) << ") fell back to separate passes: "
                                << call.fallback_reason;
      }
    }
  }
}

// ---- the plan cache and determinism ------------------------------------------------

TEST_F(LtMatmulTest, PlansAreCachedAndRunsRepeatBitForBit) {
  LtMatmul fresh(backend());
  EXPECT_EQ(fresh.heuristic_queries(), 0);
  const int64_t N = 512, C = 768, OC = 2304;
  DevTensor inp(random_values(size_t(N * C), 40), kBf16), w = weights(OC, C, kBf16, 41);
  DevTensor bias(random_values(size_t(OC), 42), kBf16), out(filled(N * OC), kBf16);
  cuda::LinearForwardArgs a;
  a.out = out.g(), a.out_format = kBf16, a.inp = inp.g(), a.w = w.g(), a.bias = bias.g(), a.bias_format = kBf16;
  a.N = N, a.C = C, a.OC = OC, a.operands = kBf16;
  fresh.linear_forward(a);
  const int64_t queries = fresh.heuristic_queries();
  const cuda::LtCallInfo first = fresh.last_call();
  const std::vector<float> out1 = out.download();
  EXPECT_GE(queries, 1);
  out.upload();  // back to zeros
  fresh.linear_forward(a);
  EXPECT_EQ(fresh.heuristic_queries(), queries) << "the same problem asked the heuristic again";
  EXPECT_EQ(std::memcmp(&fresh.last_call().algo, &first.algo, sizeof(first.algo)), 0) << "another algorithm";
  EXPECT_EQ(out.download(), out1) << "two runs of the same problem differ";

  // Weight gradients with the bias gradient, from the same start: the same bits.
  DevTensor dout(random_values(size_t(N * OC), 43), kBf16);
  std::vector<std::vector<float>> results;
  for (int run = 0; run < 2; ++run) {
    FTwin dw(random_values(size_t(OC * C), 44)), db(random_values(size_t(OC), 45));
    cuda::LinearBackwardWeightArgs b;
    b.dw = dw.g(), b.dbias = db.g(), b.dout = dout.g(), b.inp = inp.g(), b.N = N, b.C = C, b.OC = OC;
    b.operands = kBf16;
    fresh.linear_backward_weight(b);
    results.push_back(dw.gpu());
    results.push_back(db.gpu());
  }
  EXPECT_EQ(results[0], results[2]) << "dw differs between two runs";
  EXPECT_EQ(results[1], results[3]) << "dbias differs between two runs";
  const int64_t after_weight = fresh.heuristic_queries();
  EXPECT_GT(after_weight, queries);
  // Another shape is another problem.
  a.N = N - 8;
  fresh.linear_forward(a);
  EXPECT_GT(fresh.heuristic_queries(), after_weight);
  EXPECT_GE(fresh.cached_problems(), 3u);
}

// ---- bad input ----------------------------------------------------------------------

void expect_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << part << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST_F(LtMatmulTest, RejectsBadArguments) {
  DevTensor x(filled(64), kBf16), y(filled(64), kFp32);
  cuda::LinearForwardArgs f;
  f.out = y.g(), f.out_format = kFp32, f.inp = x.g(), f.w = x.g(), f.N = 8, f.C = 8, f.OC = 8;
  f.operands = kFp32;
  expect_error([&] { lt().linear_forward(f); }, "bf16 or fp16");
  f.operands = kBf16, f.out_format = kFp16;
  expect_error([&] { lt().linear_forward(f); }, "out_format");
  f.out_format = kFp32, f.inp = nullptr;
  expect_error([&] { lt().linear_forward(f); }, "inp is null");
  f.inp = static_cast<const char*>(x.g()) + 1;
  expect_error([&] { lt().linear_forward(f); }, "not aligned");
  f.inp = x.g(), f.N = -1;
  expect_error([&] { lt().linear_forward(f); }, "N=-1");
  f.N = 8, f.pre_gelu = f.out;
  expect_error([&] { lt().linear_forward(f); }, "same buffer");
  cuda::LinearBackwardInputArgs b;
  b.dinp = y.g(), b.dout = x.g(), b.w = x.g(), b.dbias_of_dinp = y.gf(), b.N = 8, b.C = 8, b.OC = 8;
  expect_error([&] { lt().linear_backward_input(b); }, "needs pre_gelu");
}

}  // namespace
}  // namespace occ::kernels
