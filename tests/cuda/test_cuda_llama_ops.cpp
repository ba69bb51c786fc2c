// The Llama family's ops on the CUDA backend against the CPU reference (ops.h):
// RMSNorm and its fused residual pairs, SwiGLU and its fused linear forms, RoPE
// forward/backward, and grouped-query attention in both fp32 attention
// implementations (the 16-bit tensor-core kernels: test_cuda_tc_attention.cpp).
// Same inputs (fixed seeds) through both; max|gpu - cpu| <= tol * max|cpu|
// (1e-5; 1e-4 for attention), dropout masks compared exactly. Shapes are not
// multiples of block sizes; gradients accumulate onto non-zero values. Without a
// visible GPU every test is SKIPPED.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/buffer.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/kernels.h"
#include "kernels/ops.h"
#include "cuda_twin.h"

namespace occ::kernels {
namespace {

TEST_F(CudaOpsTest, RmsNorm) {
  for (auto [N, C] : {std::pair<int64_t, int64_t>{33, 37}, {64, 768}, {300, 5}}) {
    const std::string tag = " N=" + std::to_string(N) + " C=" + std::to_string(C);
    FTwin inp(random_values(N * C, 130, -2.0f, 3.0f)), w(random_values(C, 131)), out(filled(N * C)), rstd(filled(N));
    cpu().rmsnorm_forward(out.c(), rstd.c(), inp.c(), w.c(), N, C, 1e-6f);
    gpu().rmsnorm_forward(out.g(), rstd.g(), inp.g(), w.g(), N, C, 1e-6f);
    expect_close(out, 1e-5, "rmsnorm out" + tag);
    expect_close(rstd, 1e-5, "rmsnorm rstd" + tag);
    FTwin r2(rstd.cpu), dout(random_values(N * C, 132)), dinp(random_values(N * C, 133)), dw(random_values(C, 134));
    cpu().rmsnorm_backward(dinp.c(), dw.c(), dout.c(), inp.c(), w.c(), r2.c(), N, C);
    gpu().rmsnorm_backward(dinp.g(), dw.g(), dout.g(), inp.g(), w.g(), r2.g(), N, C);
    expect_close(dinp, 1e-5, "rmsnorm dinp" + tag);
    expect_close(dw, 1e-5, "rmsnorm dw" + tag);
  }
}

TEST_F(CudaOpsTest, BiasDropoutAddRmsNormAndBack) {
  const int64_t T = 7, C = 45, N = 3 * T;
  for (float p : {0.0f, 0.1f})
    for (bool with_bias : {false, true}) {
      const Dropout d = make_dropout(p);
      const std::string tag = " p=" + std::to_string(p) + (with_bias ? " bias" : " no bias");
      FTwin residual(random_values(N * C, 140)), x(random_values(N * C, 141)), bias(random_values(C, 142));
      FTwin w(random_values(C, 143)), r_out(filled(N * C)), n_out(filled(N * C)), rstd(filled(N));
      cpu().bias_dropout_add_rmsnorm_forward(r_out.c(), n_out.c(), rstd.c(), residual.c(), x.c(),
                                             with_bias ? ConstTensorRef(bias.c()) : ConstTensorRef(), d, w.c(), N, T,
                                             C, 1e-5f, Precision::Fp32);
      gpu().bias_dropout_add_rmsnorm_forward(r_out.g(), n_out.g(), rstd.g(), residual.g(), x.g(),
                                             with_bias ? ConstTensorRef(bias.g()) : ConstTensorRef(), d, w.g(), N, T,
                                             C, 1e-5f, Precision::Fp32);
      expect_close(r_out, 1e-5, "bias_dropout_add_rmsnorm residual" + tag);
      expect_close(n_out, 1e-5, "bias_dropout_add_rmsnorm norm" + tag);
      expect_close(rstd, 1e-5, "bias_dropout_add_rmsnorm rstd" + tag);
      FTwin inp(r_out.cpu), r2(rstd.cpu), dout(random_values(N * C, 144)), dresid(random_values(N * C, 145));
      FTwin dx(filled(N * C, 3.0f)), dbias(random_values(C, 146)), dw(random_values(C, 147));
      cpu().rmsnorm_dropout_backward(dresid.c(), dx.c(), with_bias ? dbias.c() : nullptr, dw.c(), dout.c(), inp.c(),
                                     w.c(), r2.c(), d, N, T, C, Precision::Fp32);
      gpu().rmsnorm_dropout_backward(dresid.g(), dx.g(), with_bias ? dbias.g() : nullptr, dw.g(), dout.g(), inp.g(),
                                     w.g(), r2.g(), d, N, T, C, Precision::Fp32);
      expect_close(dresid, 1e-5, "rmsnorm_dropout_backward dresid" + tag);
      expect_close(dx, 1e-5, "rmsnorm_dropout_backward dx" + tag);
      expect_close(dbias, 1e-5, "rmsnorm_dropout_backward dbias" + tag);
      expect_close(dw, 1e-5, "rmsnorm_dropout_backward dw" + tag);
      if (d.active()) expect_same_zeros(dx.gpu(), dx.cpu, "rmsnorm_dropout_backward mask" + tag);
    }
}

TEST_F(CudaOpsTest, Swiglu) {
  for (auto [N, F] : {std::pair<int64_t, int64_t>{7, 13}, {64, 344}}) {
    const std::string tag = " N=" + std::to_string(N) + " F=" + std::to_string(F);
    FTwin inp(random_values(N * 2 * F, 150, -5.0f, 5.0f)), out(filled(N * F)), dout(random_values(N * F, 151));
    FTwin dinp(filled(N * 2 * F, 7.0f));
    cpu().swiglu_forward(out.c(), inp.c(), N, F);
    gpu().swiglu_forward(out.g(), inp.g(), N, F);
    expect_close(out, 1e-5, "swiglu_forward" + tag);
    cpu().swiglu_backward(dinp.c(), inp.c(), dout.c(), N, F);
    gpu().swiglu_backward(dinp.g(), inp.g(), dout.g(), N, F);
    expect_close(dinp, 1e-5, "swiglu_backward" + tag);
  }
}

TEST_F(CudaOpsTest, LinearSwigluForwardAndBackward) {
  const int64_t N = 37, C = 40, F = 24;
  for (bool with_bias : {false, true}) {
    const std::string tag = with_bias ? " bias" : " no bias";
    FTwin inp(random_values(N * C, 160)), w(random_values(2 * F * C, 161)), b(random_values(2 * F, 162));
    FTwin pre(filled(N * 2 * F)), act(filled(N * F));
    cpu().linear_swiglu_forward(pre.c(), act.c(), inp.c(), w.c(), with_bias ? ConstTensorRef(b.c()) : ConstTensorRef(),
                                N, C, F, Precision::Fp32);
    gpu().linear_swiglu_forward(pre.g(), act.g(), inp.g(), w.g(), with_bias ? ConstTensorRef(b.g()) : ConstTensorRef(),
                                N, C, F, Precision::Fp32);
    expect_close(pre, 1e-5, "linear_swiglu_forward pre" + tag);
    expect_close(act, 1e-5, "linear_swiglu_forward act" + tag);
    // Back through a [C, F] output projection and the SwiGLU, from the CPU's forward.
    FTwin pre2(pre.cpu), act2(act.cpu), w_out(random_values(C * F, 163)), dout(random_values(N * C, 164));
    FTwin dpre(filled(N * 2 * F, 7.0f)), dbias(random_values(2 * F, 165)), dw(random_values(C * F, 166));
    cpu().linear_backward_swiglu(dpre.c(), with_bias ? dbias.c() : nullptr, dw.c(), dout.c(), act2.c(), pre2.c(),
                                 w_out.c(), N, F, C, Precision::Fp32);
    gpu().linear_backward_swiglu(dpre.g(), with_bias ? dbias.g() : nullptr, dw.g(), dout.g(), act2.g(), pre2.g(),
                                 w_out.g(), N, F, C, Precision::Fp32);
    expect_close(dpre, 1e-5, "linear_backward_swiglu dpre" + tag);
    expect_close(dbias, 1e-5, "linear_backward_swiglu dbias" + tag);
    expect_close(dw, 1e-5, "linear_backward_swiglu dw" + tag);
  }
}

TEST_F(CudaOpsTest, Rope) {
  struct Case {
    int64_t B, T, H, KV, D, R;
  };
  const Case cases[] = {{2, 19, 4, 2, 32, 32}, {1, 130, 3, 1, 64, 32}, {3, 5, 2, 0, 8, 6}};
  for (const Case& k : cases) {
    const AttentionShape s{k.B, k.T, k.H, k.D, 0, k.H, k.KV};
    const int64_t N = k.B * k.T, table_T = k.T + 3;
    const std::string tag = " T=" + std::to_string(k.T) + " H=" + std::to_string(k.H) + " KV=" +
                            std::to_string(s.kv_heads()) + " D=" + std::to_string(k.D) + " R=" + std::to_string(k.R);
    std::vector<float> table(size_t(table_T * k.R));
    rope_table(table.data(), table_T, k.R, 10000.0);
    FTwin tab(table), qkv(random_values(N * s.qkv_width(), 170, -2.0f, 2.0f));
    cpu().rope_forward(qkv.c(), tab.c(), table_T, s, k.R);
    gpu().rope_forward(qkv.g(), tab.g(), table_T, s, k.R);
    expect_close(qkv, 1e-5, "rope_forward" + tag);
    FTwin dqkv(random_values(N * s.qkv_width(), 171));
    cpu().rope_backward(dqkv.c(), tab.c(), table_T, s, k.R);
    gpu().rope_backward(dqkv.g(), tab.g(), table_T, s, k.R);
    expect_close(dqkv, 1e-5, "rope_backward" + tag);
  }
}

void check_grouped_attention(CudaAttention impl) {
  const std::unique_ptr<Ops> gpu = make_cuda_ops(impl);
  struct Case {
    int64_t B, T, H, KV, D, head0, H_total;
  };
  // D = 32/64: the fused kernels; D = 8: the GEMM fallback; KV = 1: multi-query.
  const Case cases[] = {{2, 19, 4, 2, 32, 2, 8}, {1, 130, 3, 1, 64, 0, 3}, {3, 5, 4, 2, 8, 4, 8}};
  for (const Case& k : cases)
    for (float p : {0.0f, 0.1f}) {
      const AttentionShape s{k.B, k.T, k.H, k.D, k.head0, k.H_total, k.KV};
      const Dropout d = make_dropout(p, 0x77, 3);
      const int64_t N = k.B * k.T;
      const std::string tag = " T=" + std::to_string(k.T) + " H=" + std::to_string(k.H) + " KV=" +
                              std::to_string(k.KV) + " D=" + std::to_string(k.D) + " p=" + std::to_string(p);
      FTwin qkv(random_values(N * s.qkv_width(), 180, -2.0f, 2.0f)), out(filled(N * k.H * k.D));
      FTwin dout(random_values(N * k.H * k.D, 181)), dqkv(filled(N * s.qkv_width(), 7.0f));
      std::vector<float> saved_cpu(size_t(cpu_ops().attention_saved_floats(s, d)));
      DeviceBuffer<float> saved_gpu(Device::Cuda, size_t(gpu->attention_saved_floats(s, d)));
      cpu_ops().attention_forward(out.c(), saved_cpu.data(), qkv.c(), s, d);
      gpu->attention_forward(out.g(), saved_gpu.data(), qkv.g(), s, d);
      expect_close(out, 1e-4, "grouped attention out" + tag);
      cpu_ops().attention_backward(dqkv.c(), dout.c(), qkv.c(), out.c(), saved_cpu.data(), s, d);
      gpu->attention_backward(dqkv.g(), dout.g(), qkv.g(), out.g(), saved_gpu.data(), s, d);
      expect_close(dqkv, 1e-4, "grouped attention dqkv" + tag);
    }
}

TEST_F(CudaOpsTest, FusedGroupedQueryAttentionMatchesCpu) { check_grouped_attention(CudaAttention::Fused); }
TEST_F(CudaOpsTest, BatchedGemmGroupedQueryAttentionMatchesCpu) {
  check_grouped_attention(CudaAttention::BatchedGemm);
}

}  // namespace
}  // namespace occ::kernels
