// The CPU reference kernels of the Llama family (kernels.h) against independent
// formulations: grouped-query attention against multi-head attention with each
// k/v head copied to its group's query heads, RoPE against its formula and its
// backward against the inverse rotation, RMSNorm's and SwiGLU's backwards against
// central differences of their forwards, and the fused ops (ops.h) against their
// unfused parts. (The whole model is checked against PyTorch in cli.torch_reference.)
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "kernels/kernels.h"
#include "kernels/ops.h"

namespace occ::kernels {
namespace {

std::vector<float> values(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * uniform_at(seed, 3, i);
  return v;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::fabs(double(x)));
  return m;
}

void expect_near_all(const std::vector<float>& got, const std::vector<float>& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double scale = std::max(max_abs(want), 1e-30);
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * scale) << what << " at " << i;
}

TEST(LlamaKernels, AttentionShapeGroupsQueryHeads) {
  // 6 query heads in 2 groups of 3: rows [q0 q1 q2 k0 v0 | q3 q4 q5 k1 v1] of D each.
  const AttentionShape s{1, 4, 6, 8, 0, 6, 2};
  EXPECT_EQ(s.group_size(), 3);
  EXPECT_EQ(s.qkv_width(), 10 * 8);
  EXPECT_EQ(s.q_offset(0), 0);
  EXPECT_EQ(s.q_offset(2), 16);
  EXPECT_EQ(s.q_offset(3), 40);
  EXPECT_EQ(s.k_offset(0), 24);
  EXPECT_EQ(s.v_offset(1), 72);
  EXPECT_EQ(s.group_of(2), 0);
  EXPECT_EQ(s.group_of(3), 1);
  // Without GQA (KV 0): Megatron's [head][q|k|v].
  const AttentionShape m{1, 4, 3, 8, 0, 3};
  EXPECT_EQ(m.q_offset(1), 24);
  EXPECT_EQ(m.k_offset(1), 32);
  EXPECT_EQ(m.v_offset(2), 64);
}

TEST(LlamaKernels, GroupedQueryAttentionEqualsHeadsWithCopiedKeysAndValues) {
  const int64_t B = 2, T = 9, H = 4, G = 2, D = 8, N = B * T;
  const AttentionShape gqa{B, T, H, D, 1, 8, G}, mha{B, T, H, D, 1, 8};
  const std::vector<float> qkv = values(size_t(N * gqa.qkv_width()), 1, -2, 2);
  // The same attention as multi-head: head h gets group h / 2's k and v.
  std::vector<float> expanded(size_t(N * mha.qkv_width()));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d) {
        const float* row = qkv.data() + n * gqa.qkv_width();
        float* out = expanded.data() + n * mha.qkv_width();
        out[mha.q_offset(h) + d] = row[gqa.q_offset(h) + d];
        out[mha.k_offset(h) + d] = row[gqa.k_offset(gqa.group_of(h)) + d];
        out[mha.v_offset(h) + d] = row[gqa.v_offset(gqa.group_of(h)) + d];
      }
  for (float p : {0.0f, 0.2f}) {
    const Dropout drop{0x51, p, 3};
    std::vector<float> out_g(size_t(N * H * D)), out_m(out_g.size());
    std::vector<float> probs_g(size_t(B * H * T * T)), drop_g(probs_g.size()), probs_m(probs_g.size()),
        drop_m(probs_g.size());
    attention_forward(out_g.data(), probs_g.data(), drop_g.data(), qkv.data(), gqa, drop);
    attention_forward(out_m.data(), probs_m.data(), drop_m.data(), expanded.data(), mha, drop);
    EXPECT_EQ(out_g, out_m) << "p=" << p;
    const std::vector<float> dout = values(out_g.size(), 2);
    std::vector<float> dqkv_g(qkv.size(), 9.0f), dqkv_m(expanded.size(), 9.0f);
    attention_backward(dqkv_g.data(), dout.data(), qkv.data(), probs_g.data(), drop_g.data(), gqa, drop);
    attention_backward(dqkv_m.data(), dout.data(), expanded.data(), probs_m.data(), drop_m.data(), mha, drop);
    // dq per head equal; dk, dv of a group the sum over its heads (in head order).
    for (int64_t n = 0; n < N; ++n)
      for (int64_t d = 0; d < D; ++d) {
        const float* g = dqkv_g.data() + n * gqa.qkv_width();
        const float* m = dqkv_m.data() + n * mha.qkv_width();
        for (int64_t h = 0; h < H; ++h) ASSERT_EQ(g[gqa.q_offset(h) + d], m[mha.q_offset(h) + d]);
        for (int64_t k = 0; k < G; ++k) {
          const float dk = m[mha.k_offset(2 * k) + d] + m[mha.k_offset(2 * k + 1) + d];
          const float dv = m[mha.v_offset(2 * k) + d] + m[mha.v_offset(2 * k + 1) + d];
          ASSERT_NEAR(g[gqa.k_offset(k) + d], dk, 1e-6f * (1 + std::fabs(dk)));
          ASSERT_NEAR(g[gqa.v_offset(k) + d], dv, 1e-6f * (1 + std::fabs(dv)));
        }
      }
  }
}

TEST(LlamaKernels, RopeRotatesHalfPairsAndBackwardInverts) {
  const int64_t B = 2, T = 5, H = 4, G = 2, D = 8, R = 6, N = B * T;  // 6 of 8 features rotated
  const AttentionShape s{B, T, H, D, 0, H, G};
  const double base = 100.0;
  std::vector<float> table(size_t(2 * T * R / 2));
  rope_table(table.data(), T, R, base);
  const std::vector<float> x = values(size_t(N * s.qkv_width()), 4);
  std::vector<float> y = x;
  rope_forward(y.data(), table.data(), T, s, R);
  auto expect_head = [&](int64_t n, int64_t off) {  // the formula, in double
    const int64_t t = n % T;
    for (int64_t i = 0; i < R / 2; ++i) {
      const double a = double(t) * std::pow(base, -2.0 * double(i) / double(R));
      const double x1 = x[size_t(n * s.qkv_width() + off + i)], x2 = x[size_t(n * s.qkv_width() + off + i + R / 2)];
      EXPECT_NEAR(y[size_t(n * s.qkv_width() + off + i)], x1 * std::cos(a) - x2 * std::sin(a), 1e-6);
      EXPECT_NEAR(y[size_t(n * s.qkv_width() + off + i + R / 2)], x2 * std::cos(a) + x1 * std::sin(a), 1e-6);
    }
    for (int64_t i = R; i < D; ++i)
      EXPECT_EQ(y[size_t(n * s.qkv_width() + off + i)], x[size_t(n * s.qkv_width() + off + i)]);
  };
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t h = 0; h < H; ++h) expect_head(n, s.q_offset(h));
    for (int64_t g = 0; g < G; ++g) {
      expect_head(n, s.k_offset(g));
      for (int64_t d = 0; d < D; ++d)  // v unchanged
        EXPECT_EQ(y[size_t(n * s.qkv_width() + s.v_offset(g) + d)], x[size_t(n * s.qkv_width() + s.v_offset(g) + d)]);
    }
  }
  // The rotation is orthogonal: its backward (the transpose) undoes it.
  rope_backward(y.data(), table.data(), T, s, R);
  expect_near_all(y, x, 1e-6, "rope_backward(rope_forward(x))");
}

// Central differences of sum(dout * f(x)) in double around the float inputs.
template <class F>
std::vector<float> numeric_grad(std::vector<float> x, const std::vector<float>& dout, F&& f) {
  std::vector<float> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float x0 = x[i], h = 1e-2f;
    auto loss = [&](float v) {
      x[i] = v;
      const std::vector<float> y = f(x);
      double s = 0;
      for (size_t j = 0; j < y.size(); ++j) s += double(dout[j]) * y[j];
      return s;
    };
    g[i] = float((loss(x0 + h) - loss(x0 - h)) / (2.0 * double(h)));
    x[i] = x0;
  }
  return g;
}

TEST(LlamaKernels, RmsNormForwardAndBackward) {
  const int64_t N = 3, C = 7;
  const float eps = 1e-6f;
  const std::vector<float> x = values(size_t(N * C), 5, -2, 2), w = values(size_t(C), 6, 0.5f, 1.5f);
  auto fwd = [&](const std::vector<float>& in) {
    std::vector<float> out(in.size()), rstd(static_cast<size_t>(N));
    rmsnorm_forward(out.data(), rstd.data(), in.data(), w.data(), N, C, eps);
    return out;
  };
  std::vector<float> out(x.size()), rstd(static_cast<size_t>(N));
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
  for (int64_t n = 0; n < N; ++n) {
    double ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += double(x[size_t(n * C + c)]) * x[size_t(n * C + c)];
    const double r = 1.0 / std::sqrt(ss / double(C) + eps);
    EXPECT_NEAR(rstd[size_t(n)], r, 1e-6 * r);
    for (int64_t c = 0; c < C; ++c) EXPECT_NEAR(out[size_t(n * C + c)], x[size_t(n * C + c)] * r * w[size_t(c)], 1e-5);
  }
  const std::vector<float> dout = values(x.size(), 7);
  std::vector<float> dx(x.size(), 0.5f), dw(size_t(C), 0.25f);  // both accumulate
  rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  std::vector<float> want_dx = numeric_grad(x, dout, fwd);
  for (float& v : want_dx) v += 0.5f;
  expect_near_all(dx, want_dx, 2e-3, "rmsnorm dinp");
  std::vector<float> want_dw = numeric_grad(w, dout, [&](const std::vector<float>& ww) {
    std::vector<float> o(x.size()), r(static_cast<size_t>(N));
    rmsnorm_forward(o.data(), r.data(), x.data(), ww.data(), N, C, eps);
    return o;
  });
  for (float& v : want_dw) v += 0.25f;
  expect_near_all(dw, want_dw, 2e-3, "rmsnorm dw");
}

TEST(LlamaKernels, SwigluGateThenUpAndBackward) {
  const int64_t N = 3, F = 5;
  const std::vector<float> x = values(size_t(N * 2 * F), 8, -3, 3);
  auto fwd = [&](const std::vector<float>& in) {
    std::vector<float> out(size_t(N * F));
    swiglu_forward(out.data(), in.data(), N, F);
    return out;
  };
  const std::vector<float> out = fwd(x);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t f = 0; f < F; ++f) {
      const double g = x[size_t(n * 2 * F + f)], u = x[size_t(n * 2 * F + F + f)];
      EXPECT_NEAR(out[size_t(n * F + f)], g / (1 + std::exp(-g)) * u, 1e-5);
    }
  const std::vector<float> dout = values(out.size(), 9);
  std::vector<float> dx(x.size(), 7.0f);  // overwritten
  swiglu_backward(dx.data(), x.data(), dout.data(), N, F);
  expect_near_all(dx, numeric_grad(x, dout, fwd), 2e-3, "swiglu dinp");
}

TEST(LlamaKernels, FusedOpsEqualTheirParts) {
  Ops& ops = cpu_ops();
  const int64_t B = 2, T = 3, N = B * T, C = 6, F = 4;
  const float eps = 1e-5f;
  const Dropout drop{0x99, 0.25f, 1};
  const std::vector<float> resid = values(size_t(N * C), 10), x = values(size_t(N * C), 11),
                           w = values(size_t(C), 12, 0.5f, 1.5f);
  // residual + dropout(x) then RMSNorm, fused and apart (no bias: --disable-bias-linear).
  std::vector<float> r_f(resid.size()), n_f(resid.size()), s_f(static_cast<size_t>(N)), r_p(resid.size()), n_p(resid.size()),
      s_p(static_cast<size_t>(N));
  ops.bias_dropout_add_rmsnorm_forward(r_f.data(), n_f.data(), s_f.data(), resid.data(), x.data(), ConstTensorRef(),
                                       drop, w.data(), N, T, C, eps, Precision::Fp32);
  ops.bias_dropout_add_forward(r_p.data(), resid.data(), x.data(), ConstTensorRef(), drop, N, T, C);
  ops.rmsnorm_forward(n_p.data(), s_p.data(), r_p.data(), w.data(), N, C, eps);
  EXPECT_EQ(r_f, r_p);
  expect_near_all(n_f, n_p, 1e-6, "fused rmsnorm out");
  // Its backward: norm backward into dresid, dropout backward of the sum into dx.
  const std::vector<float> dout = values(resid.size(), 13);
  std::vector<float> dres_f(resid.size(), 0.5f), dx_f(resid.size()), dw_f(static_cast<size_t>(C)), dres_p = dres_f,
      dx_p(resid.size()), dw_p(static_cast<size_t>(C));
  ops.rmsnorm_dropout_backward(dres_f.data(), dx_f.data(), nullptr, dw_f.data(), dout.data(), r_f.data(), w.data(),
                               s_f.data(), drop, N, T, C, Precision::Fp32);
  ops.rmsnorm_backward(dres_p.data(), dw_p.data(), dout.data(), r_p.data(), w.data(), s_p.data(), N, C);
  ops.bias_dropout_add_backward(dx_p.data(), nullptr, dres_p.data(), drop, N, T, C);
  expect_near_all(dres_f, dres_p, 1e-6, "fused rmsnorm dresid");
  expect_near_all(dx_f, dx_p, 1e-6, "fused rmsnorm dx");
  expect_near_all(dw_f, dw_p, 1e-6, "fused rmsnorm dw");
  // Linear + SwiGLU, fused and apart; and back through the output projection.
  const std::vector<float> inp = values(size_t(N * C), 14), fc_w = values(size_t(2 * F * C), 15),
                           fc_b = values(size_t(2 * F), 16);
  std::vector<float> pre_f(size_t(N * 2 * F)), act_f(size_t(N * F)), pre_p(pre_f.size()), act_p(act_f.size());
  ops.linear_swiglu_forward(pre_f.data(), act_f.data(), inp.data(), fc_w.data(), fc_b.data(), N, C, F,
                            Precision::Fp32);
  ops.linear_forward(pre_p.data(), inp.data(), fc_w.data(), fc_b.data(), N, C, 2 * F, Precision::Fp32);
  ops.swiglu_forward(act_p.data(), pre_p.data(), N, F);
  expect_near_all(pre_f, pre_p, 1e-6, "linear_swiglu pre");
  expect_near_all(act_f, act_p, 1e-6, "linear_swiglu act");
  const std::vector<float> w_out = values(size_t(C * F), 17), d_y = values(size_t(N * C), 18);
  std::vector<float> dpre_f(pre_f.size()), db_f(size_t(2 * F), 0.5f), dw_f2(size_t(C * F), 0.25f);
  std::vector<float> dpre_p(pre_f.size()), db_p(size_t(2 * F), 0.5f), dw_p2(size_t(C * F), 0.25f), dact(act_f.size());
  ops.linear_backward_swiglu(dpre_f.data(), db_f.data(), dw_f2.data(), d_y.data(), act_f.data(), pre_f.data(),
                             w_out.data(), N, F, C, Precision::Fp32);
  ops.linear_backward(dact.data(), dw_p2.data(), nullptr, d_y.data(), act_p.data(), w_out.data(), N, F, C, false,
                      Precision::Fp32);
  ops.swiglu_backward(dpre_p.data(), pre_p.data(), dact.data(), N, F);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < 2 * F; ++j) db_p[size_t(j)] += dpre_p[size_t(n * 2 * F + j)];
  expect_near_all(dpre_f, dpre_p, 1e-5, "linear_backward_swiglu dpre");
  expect_near_all(db_f, db_p, 1e-5, "linear_backward_swiglu dbias");
  expect_near_all(dw_f2, dw_p2, 1e-6, "linear_backward_swiglu dw");
}

}  // namespace
}  // namespace occ::kernels
