// The CUDA backend against the CPU reference (kernels/ops.h), op by op: the
// same random inputs (fixed seeds) go through cpu_ops() and the CUDA backend,
// and the results must agree to max|gpu - cpu| <= tol * max|cpu| (1e-5; 1e-4
// for attention and cross-entropy). Dropout masks must be bit-identical: the
// tests compare which elements are zero. Shapes are deliberately not
// multiples of block or tile sizes; vocab-parallel offsets, accumulate flags
// and in-place use are covered. Without a visible GPU every test is SKIPPED.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/buffer.h"
#include "core/precision.h"
#include "core/rng.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"
#include "cuda_twin.h"

namespace occ::kernels {
namespace {

TEST_F(CudaOpsTest, CopyFillUploadTokens) {
  FTwin src(random_values(1001, 1)), dst(filled(1001, 0.0f));
  gpu().copy(dst.g(), src.g(), 1001);
  EXPECT_EQ(dst.gpu(), src.cpu);
  gpu().fill(dst.g(), 2.5f, 999);
  auto filled = dst.gpu();
  EXPECT_EQ(filled[998], 2.5f);
  EXPECT_EQ(filled[999], src.cpu[999]);
  const auto tokens = random_ints(77, 2, 0, 50000);
  DeviceBuffer<int32_t> dev_tokens(Device::Cuda, tokens.size());
  gpu().upload_tokens(dev_tokens.data(), tokens.data(), int64_t(tokens.size()));
  EXPECT_EQ(dev_tokens.to_host(), tokens);
}

TEST_F(CudaOpsTest, LinearForward) {
  for (auto [N, C, OC] : {std::tuple<int64_t, int64_t, int64_t>{37, 50, 29}, {256, 128, 96}, {1, 7, 300}}) {
    for (bool with_bias : {false, true}) {
      FTwin inp(random_values(N * C, 10)), w(random_values(OC * C, 11)), bias(random_values(OC, 12));
      FTwin out(filled(N * OC, 9.0f));
      cpu().linear_forward(out.c(), inp.c(), w.c(), with_bias ? bias.c() : nullptr, N, C, OC);
      gpu().linear_forward(out.g(), inp.g(), w.g(), with_bias ? bias.g() : nullptr, N, C, OC);
      expect_close(out, 1e-5, "linear_forward N=" + std::to_string(N) + " bias=" + std::to_string(with_bias));
    }
  }
}

TEST_F(CudaOpsTest, LinearBackward) {
  const int64_t N = 45, C = 70, OC = 33;
  for (bool accumulate : {false, true}) {
    for (int which = 0; which < 3; ++which) {  // 0: all grads, 1: no dinp, 2: no dbias
      FTwin dout(random_values(N * OC, 20)), inp(random_values(N * C, 21)), w(random_values(OC * C, 22));
      FTwin dinp(random_values(N * C, 23)), dw(random_values(OC * C, 24)), dbias(random_values(OC, 25));
      float* cd = which == 1 ? nullptr : dinp.c();
      float* gd = which == 1 ? nullptr : dinp.g();
      cpu().linear_backward(cd, dw.c(), which == 2 ? nullptr : dbias.c(), dout.c(), inp.c(), w.c(), N, C, OC,
                            accumulate);
      gpu().linear_backward(gd, dw.g(), which == 2 ? nullptr : dbias.g(), dout.g(), inp.g(), w.g(), N, C, OC,
                            accumulate);
      const std::string tag = " acc=" + std::to_string(accumulate) + " case " + std::to_string(which);
      expect_close(dinp, 1e-5, "dinp" + tag);
      expect_close(dw, 1e-5, "dw" + tag);
      expect_close(dbias, 1e-5, "dbias" + tag);
    }
  }
}

// --bf16 / --fp16: operands holding values of the format multiply on the GPU's
// tensor cores (16-bit copies, fp32 accumulation), on the CPU in fp32. Each
// product is exact either way, so they agree to summation order (K up to 768).
std::vector<float> rounded(std::vector<float> v, Precision p) {
  for (float& x : v) x = round_to(p, x);
  return v;
}

TEST_F(CudaOpsTest, LinearSixteenBitOperands) {
  for (Precision p : {Precision::Bf16, Precision::Fp16}) {
    const std::string fmt = precision_name(p);
    for (auto [N, C, OC] : {std::tuple<int64_t, int64_t, int64_t>{37, 50, 29}, {256, 768, 96}, {1, 7, 300}}) {
      FTwin inp(rounded(random_values(N * C, 10), p)), w(rounded(random_values(OC * C, 11), p));
      FTwin bias(random_values(OC, 12)), out(filled(N * OC, 9.0f));
      cpu().linear_forward(out.c(), inp.c(), w.c(), bias.c(), N, C, OC, p);
      gpu().linear_forward(out.g(), inp.g(), w.g(), bias.g(), N, C, OC, p);
      expect_close(out, 1e-5, fmt + " linear_forward N=" + std::to_string(N) + " C=" + std::to_string(C));
    }
    const int64_t N = 300, C = 70, OC = 33;
    for (bool accumulate : {false, true}) {
      for (int which = 0; which < 3; ++which) {  // 0: all grads, 1: no dinp, 2: no dbias
        FTwin dout(rounded(random_values(N * OC, 20), p)), inp(rounded(random_values(N * C, 21), p));
        FTwin w(rounded(random_values(OC * C, 22), p));
        FTwin dinp(random_values(N * C, 23)), dw(random_values(OC * C, 24)), dbias(random_values(OC, 25));
        float* cd = which == 1 ? nullptr : dinp.c();
        float* gd = which == 1 ? nullptr : dinp.g();
        cpu().linear_backward(cd, dw.c(), which == 2 ? nullptr : dbias.c(), dout.c(), inp.c(), w.c(), N, C, OC,
                              accumulate, p);
        gpu().linear_backward(gd, dw.g(), which == 2 ? nullptr : dbias.g(), dout.g(), inp.g(), w.g(), N, C, OC,
                              accumulate, p);
        const std::string tag = " " + fmt + " acc=" + std::to_string(accumulate) + " case " + std::to_string(which);
        expect_close(dinp, 1e-5, "dinp" + tag);
        expect_close(dw, 1e-5, "dw" + tag);
        expect_close(dbias, 1e-5, "dbias" + tag);
      }
    }
  }
}


TEST_F(CudaOpsTest, LayerNorm) {
  for (auto [N, C] : {std::pair<int64_t, int64_t>{33, 37}, {64, 768}, {300, 5}}) {
    FTwin inp(random_values(N * C, 30, -2.0f, 3.0f)), w(random_values(C, 31)), b(random_values(C, 32));
    FTwin out(filled(N * C)), mean(filled(N)), rstd(filled(N));
    cpu().layernorm_forward(out.c(), mean.c(), rstd.c(), inp.c(), w.c(), b.c(), N, C, 1e-5f);
    gpu().layernorm_forward(out.g(), mean.g(), rstd.g(), inp.g(), w.g(), b.g(), N, C, 1e-5f);
    const std::string tag = " N=" + std::to_string(N) + " C=" + std::to_string(C);
    expect_close(out, 1e-5, "layernorm out" + tag);
    expect_close(mean, 1e-5, "layernorm mean" + tag);
    expect_close(rstd, 1e-5, "layernorm rstd" + tag);
    // Backward from the CPU's statistics on both sides; gradients accumulate onto non-zero values.
    FTwin m2(mean.cpu), r2(rstd.cpu), dout(random_values(N * C, 33));
    FTwin dinp(random_values(N * C, 34)), dw(random_values(C, 35)), db(random_values(C, 36));
    cpu().layernorm_backward(dinp.c(), dw.c(), db.c(), dout.c(), inp.c(), w.c(), m2.c(), r2.c(), N, C);
    gpu().layernorm_backward(dinp.g(), dw.g(), db.g(), dout.g(), inp.g(), w.g(), m2.g(), r2.g(), N, C);
    expect_close(dinp, 1e-5, "layernorm dinp" + tag);
    expect_close(dw, 1e-5, "layernorm dw" + tag);
    expect_close(db, 1e-5, "layernorm db" + tag);
  }
}

TEST_F(CudaOpsTest, Gelu) {
  const int64_t n = 1003;
  FTwin inp(random_values(n, 40, -5.0f, 5.0f)), dout(random_values(n, 41)), out(filled(n));
  FTwin dinp(filled(n));
  cpu().gelu_forward(out.c(), inp.c(), n);
  gpu().gelu_forward(out.g(), inp.g(), n);
  expect_close(out, 1e-5, "gelu_forward");
  cpu().gelu_backward(dinp.c(), inp.c(), dout.c(), n);
  gpu().gelu_backward(dinp.g(), inp.g(), dout.g(), n);
  expect_close(dinp, 1e-5, "gelu_backward");
  // In place (dinp == dout), as gpt.cpp calls it: gelu_backward(d_fc, fc, d_fc, n).
  FTwin inplace(dout.cpu);
  cpu().gelu_backward(inplace.c(), inp.c(), inplace.c(), n);
  gpu().gelu_backward(inplace.g(), inp.g(), inplace.g(), n);
  expect_close(inplace, 1e-5, "gelu_backward in place");
}

TEST_F(CudaOpsTest, BiasDropoutAdd) {
  const int64_t T = 7, C = 13, N = 3 * T;  // T * C = 91: Philox groups straddle rows and samples
  for (float p : {0.0f, 0.1f}) {
    const Dropout d = make_dropout(p);
    const std::string tag = " p=" + std::to_string(p);
    FTwin x(random_values(N * C, 50)), bias(random_values(C, 51)), zero(filled(N * C, 0.0f));
    FTwin residual(random_values(N * C, 52)), out(filled(N * C));
    cpu().bias_dropout_add_forward(out.c(), residual.c(), x.c(), bias.c(), d, N, T, C);
    gpu().bias_dropout_add_forward(out.g(), residual.g(), x.g(), bias.g(), d, N, T, C);
    expect_close(out, 1e-5, "bias_dropout_add_forward" + tag);
    if (d.active()) {  // with a zero residual the output is zero exactly where dropped
      FTwin masked(filled(N * C));
      cpu().bias_dropout_add_forward(masked.c(), zero.c(), x.c(), bias.c(), d, N, T, C);
      gpu().bias_dropout_add_forward(masked.g(), zero.g(), x.g(), bias.g(), d, N, T, C);
      expect_same_zeros(masked.gpu(), masked.cpu, "bias_dropout_add mask");
    }
    // Backward, out of place and in place (dx == dout); dbias accumulates.
    FTwin dout(random_values(N * C, 53)), dx(filled(N * C)), dbias(random_values(C, 54));
    cpu().bias_dropout_add_backward(dx.c(), dbias.c(), dout.c(), d, N, T, C);
    gpu().bias_dropout_add_backward(dx.g(), dbias.g(), dout.g(), d, N, T, C);
    expect_close(dx, 1e-5, "bias_dropout_add_backward dx" + tag);
    expect_close(dbias, 1e-5, "bias_dropout_add_backward dbias" + tag);
    if (d.active()) expect_same_zeros(dx.gpu(), dx.cpu, "bias_dropout_add_backward mask");
    cpu().bias_dropout_add_backward(dout.c(), dbias.c(), dout.c(), d, N, T, C);
    gpu().bias_dropout_add_backward(dout.g(), dbias.g(), dout.g(), d, N, T, C);
    expect_close(dout, 1e-5, "bias_dropout_add_backward in place" + tag);
    expect_close(dbias, 1e-5, "bias_dropout_add_backward in place dbias" + tag);
  }
}

TEST_F(CudaOpsTest, DropoutInplaceMaskIsBitIdentical) {
  for (auto [T, C, B] : {std::tuple<int64_t, int64_t, int64_t>{7, 13, 3}, {64, 128, 2}, {1, 3, 5}}) {
    const int64_t N = B * T;
    const Dropout d = make_dropout(0.1f, 0xABCDEF, 11);
    FTwin x(filled(N * C, 1.0f));
    cpu().dropout_inplace(x.c(), d, N, T, C);
    gpu().dropout_inplace(x.g(), d, N, T, C);
    EXPECT_EQ(x.gpu(), x.cpu) << "dropout_inplace T=" << T << " C=" << C;  // 0 or 1/(1-p), exactly
    expect_same_zeros(x.gpu(), x.cpu, "dropout_inplace");
  }
  FTwin y(random_values(50, 60));
  gpu().dropout_inplace(y.g(), make_dropout(0.0f), 5, 5, 10);  // p = 0: untouched
  EXPECT_EQ(y.gpu(), y.cpu);
}

// Sequence parallelism's shards (Dropout::row0): a rank's rows, starting inside a
// sample, get the CPU's masks of the same global rows, on the packed path (C a multiple
// of the pack) and the scalar one (C = 13), forward and backward.
TEST_F(CudaOpsTest, DropoutOnARowShardMatchesCpu) {
  for (auto [T, C, row0, N] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{7, 13, 3, 9}, {32, 64, 16, 40},
                                {5, 8, 12, 4}}) {
    Dropout d = make_dropout(0.1f, 0xBEEF, 3);
    d.row0 = row0;
    const std::string tag = " T=" + std::to_string(T) + " C=" + std::to_string(C) + " row0=" + std::to_string(row0);
    FTwin x(filled(N * C, 1.0f));
    cpu().dropout_inplace(x.c(), d, N, T, C);
    gpu().dropout_inplace(x.g(), d, N, T, C);
    EXPECT_EQ(x.gpu(), x.cpu) << "dropout_inplace" << tag;
    FTwin y(random_values(N * C, 61)), bias(random_values(C, 62)), residual(random_values(N * C, 63)),
        out(filled(N * C));
    cpu().bias_dropout_add_forward(out.c(), residual.c(), y.c(), bias.c(), d, N, T, C);
    gpu().bias_dropout_add_forward(out.g(), residual.g(), y.g(), bias.g(), d, N, T, C);
    expect_close(out, 1e-5, "bias_dropout_add_forward" + tag);
    FTwin dout(random_values(N * C, 64)), dx(filled(N * C)), dbias(random_values(C, 65));
    cpu().bias_dropout_add_backward(dx.c(), dbias.c(), dout.c(), d, N, T, C);
    gpu().bias_dropout_add_backward(dx.g(), dbias.g(), dout.g(), d, N, T, C);
    expect_close(dx, 1e-5, "bias_dropout_add_backward" + tag);
    expect_same_zeros(dx.gpu(), dx.cpu, "bias_dropout_add_backward mask" + tag);
  }
}

// ---- attention: both CUDA implementations against the CPU ------------------------------
void check_attention(CudaAttention impl) {
  const std::unique_ptr<Ops> gpu = make_cuda_ops(impl);
  struct Case {
    int64_t B, T, H, D, head0, H_total;
  };
  // D = 32/64/128: the fused kernels; D = 8: the GEMM fallback. B > H takes the other batching.
  const Case cases[] = {{2, 19, 3, 32, 2, 8}, {1, 130, 2, 64, 0, 2}, {3, 5, 2, 8, 1, 4},
                        {2, 67, 1, 128, 3, 4}, {1, 1, 1, 32, 0, 1},  {4, 70, 1, 32, 5, 6}};
  for (const Case& k : cases) {
    for (float p : {0.0f, 0.1f}) {
      const AttentionShape s{k.B, k.T, k.H, k.D, k.head0, k.H_total};
      const Dropout d = make_dropout(p, 0x77, 3);
      const int64_t N = k.B * k.T;
      const std::string tag = " B=" + std::to_string(k.B) + " T=" + std::to_string(k.T) + " H=" +
                              std::to_string(k.H) + " D=" + std::to_string(k.D) + " p=" + std::to_string(p);
      FTwin qkv(random_values(N * 3 * k.H * k.D, 70, -2.0f, 2.0f)), out(filled(N * k.H * k.D));
      FTwin dout(random_values(N * k.H * k.D, 71));
      FTwin dqkv(filled(N * 3 * k.H * k.D, 7.0f));  // must be overwritten entirely
      std::vector<float> saved_cpu(size_t(cpu_ops().attention_saved_floats(s, d)));
      DeviceBuffer<float> saved_gpu(Device::Cuda, size_t(gpu->attention_saved_floats(s, d)));
      cpu_ops().attention_forward(out.c(), saved_cpu.data(), qkv.c(), s, d);
      gpu->attention_forward(out.g(), saved_gpu.data(), qkv.g(), s, d);
      expect_close(out, 1e-4, "attention out" + tag);
      if (impl == CudaAttention::BatchedGemm) {  // same saved layout as the CPU
        const auto saved = saved_gpu.to_host();
        const size_t probs = size_t(k.B * k.H * k.T * k.T);
        expect_close(std::vector<float>(saved.begin(), saved.begin() + probs),
                     std::vector<float>(saved_cpu.begin(), saved_cpu.begin() + probs), 1e-4, "probs" + tag);
        // (T = 1: the single probability {key 0x77, sample 3, index 0} is kept, so no zero is required.)
        if (d.active())
          expect_same_zeros(std::vector<float>(saved.begin() + probs, saved.end()),
                            std::vector<float>(saved_cpu.begin() + probs, saved_cpu.end()), "dropped probs" + tag,
                            /*require_zeros=*/k.T > 1);
      }
      cpu_ops().attention_backward(dqkv.c(), dout.c(), qkv.c(), nullptr, saved_cpu.data(), s, d);
      gpu->attention_backward(dqkv.g(), dout.g(), qkv.g(), nullptr, saved_gpu.data(), s, d);
      expect_close(dqkv, 1e-4, "attention dqkv" + tag);
    }
  }
}

TEST_F(CudaOpsTest, FusedAttentionMatchesCpu) { check_attention(CudaAttention::Fused); }
TEST_F(CudaOpsTest, BatchedGemmAttentionMatchesCpu) { check_attention(CudaAttention::BatchedGemm); }

// ---- embeddings ------------------------------------------------------------------------
TEST_F(CudaOpsTest, TokenEmbedding) {
  // A vocab shard [v0, v0 + V) with tokens inside and outside it, many repeats;
  // N = 3000 exercises the multi-tile sort.
  for (auto [N, V, v0] : {std::tuple<int64_t, int64_t, int64_t>{67, 50, 20}, {3000, 64, 0}, {5, 7, 100}}) {
    const int64_t C = 33;
    ITwin tokens(random_ints(size_t(N), 80 + N, 0, int32_t(v0 + V + 30)));
    FTwin wte(random_values(V * C, 81)), out(filled(N * C, 5.0f));
    cpu().embedding_forward(out.c(), tokens.c(), wte.c(), v0, V, N, C);
    gpu().embedding_forward(out.g(), tokens.g(), wte.g(), v0, V, N, C);
    const std::string tag = " N=" + std::to_string(N) + " v0=" + std::to_string(v0);
    expect_close(out, 1e-5, "embedding_forward" + tag);
    FTwin dout(random_values(N * C, 82)), dwte(random_values(V * C, 83));
    cpu().embedding_backward(dwte.c(), dout.c(), tokens.c(), v0, V, N, C);
    gpu().embedding_backward(dwte.g(), dout.g(), tokens.g(), v0, V, N, C);
    expect_close(dwte, 1e-5, "embedding_backward" + tag);
  }
}

TEST_F(CudaOpsTest, PositionEmbedding) {
  const int64_t T = 11, C = 19, N = 4 * T;
  FTwin wpe(random_values(T * C, 90)), out(random_values(N * C, 91));
  cpu().position_forward(out.c(), wpe.c(), N, T, C);
  gpu().position_forward(out.g(), wpe.g(), N, T, C);
  expect_close(out, 1e-5, "position_forward");
  FTwin dout(random_values(N * C, 92)), dwpe(random_values(T * C, 93));
  cpu().position_backward(dwpe.c(), dout.c(), N, T, C);
  gpu().position_backward(dwpe.g(), dout.g(), N, T, C);
  expect_close(dwpe, 1e-5, "position_backward");
}

// ---- cross-entropy -----------------------------------------------------------------------
TEST_F(CudaOpsTest, VocabParallelCrossEntropy) {
  const int64_t N = 13, V = 1031, v0 = 500;
  ITwin labels(random_ints(N, 100, 0, 2000));  // some inside the shard [500, 1531), some outside
  FTwin logits(random_values(N * V, 101, -6.0f, 6.0f));
  FTwin mx(filled(N)), sum(filled(N)), target(filled(N));
  cpu().row_max(mx.c(), logits.c(), N, V);
  gpu().row_max(mx.g(), logits.g(), N, V);
  expect_close(mx, 1e-4, "row_max");
  cpu().row_sum_exp(sum.c(), logits.c(), mx.c(), N, V);
  gpu().row_sum_exp(sum.g(), logits.g(), mx.g(), N, V);
  expect_close(sum, 1e-4, "row_sum_exp");
  cpu().target_logit(target.c(), logits.c(), labels.c(), v0, N, V);
  gpu().target_logit(target.g(), logits.g(), labels.g(), v0, N, V);
  expect_close(target, 1e-4, "target_logit");
  const double loss_cpu = loss_sum(cpu(), [&](double* l) { cpu().cross_entropy_loss_sum(l, mx.c(), sum.c(), target.c(), N); });
  const double loss_gpu = loss_sum(gpu(), [&](double* l) { gpu().cross_entropy_loss_sum(l, mx.g(), sum.g(), target.g(), N); });
  EXPECT_NEAR(loss_gpu, loss_cpu, 1e-4 * std::fabs(loss_cpu)) << "cross_entropy_loss_sum";
  cpu().cross_entropy_backward_inplace(logits.c(), mx.c(), sum.c(), labels.c(), v0, 0.25f, N, V);
  gpu().cross_entropy_backward_inplace(logits.g(), mx.g(), sum.g(), labels.g(), v0, 0.25f, N, V);
  expect_close(logits, 1e-4, "cross_entropy_backward_inplace");
}

TEST_F(CudaOpsTest, FusedCrossEntropy) {
  for (auto [N, V] : {std::pair<int64_t, int64_t>{13, 1031}, {100, 50304}, {3, 1}}) {
    for (float grad_scale : {0.0f, 0.125f}) {
      ITwin labels(random_ints(N, 110, 0, int32_t(V)));
      FTwin logits(random_values(N * V, 111, -8.0f, 8.0f));
      const double loss_cpu = loss_sum(
          cpu(), [&](double* l) { cpu().cross_entropy_fused(logits.c(), labels.c(), grad_scale, N, V, l); });
      const double loss_gpu = loss_sum(
          gpu(), [&](double* l) { gpu().cross_entropy_fused(logits.g(), labels.g(), grad_scale, N, V, l); });
      const std::string tag = " N=" + std::to_string(N) + " V=" + std::to_string(V) + " scale=" +
                              std::to_string(grad_scale);
      EXPECT_NEAR(loss_gpu, loss_cpu, 1e-4 * std::max(std::fabs(loss_cpu), 1e-3)) << "loss" << tag;
      expect_close(logits, 1e-4, "cross_entropy_fused logits" + tag);  // unchanged when grad_scale == 0
    }
  }
}

// ---- optimizer ---------------------------------------------------------------------------
TEST_F(CudaOpsTest, AdamW) {
  const int64_t n = 10007;
  FTwin params(random_values(n, 120)), grads(random_values(n, 121, -0.1f, 0.1f));
  FTwin m(random_values(n, 122, -0.01f, 0.01f)), v(random_values(n, 123, 0.0f, 1e-3f));
  std::vector<uint8_t> decay_host(n);
  for (int64_t i = 0; i < n; ++i) decay_host[i] = (i % 3) != 0;
  DeviceBuffer<uint8_t> decay(Device::Cuda);
  decay.assign_from_host(decay_host);
  const AdamWStep step{3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f / (1.0f - 0.9f * 0.9f), 1.0f / (1.0f - 0.95f * 0.95f)};
  for (int it = 0; it < 3; ++it) {
    cpu().adamw_update(params.c(), grads.c(), m.c(), v.c(), decay_host.data(), n, step);
    cuda_ops().adamw_update(params.g(), grads.g(), m.g(), v.g(), decay.data(), n, step);
  }
  expect_close(params, 1e-5, "adamw params");
  expect_close(m, 1e-5, "adamw m");
  expect_close(v, 1e-5, "adamw v");
}

TEST_F(CudaOpsTest, SumSquaresAndScale) {
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(100003)}) {
    FTwin x(random_values(size_t(n), 130, -3.0f, 3.0f));
    const double ref = cpu().sum_squares(x.c(), n), got = gpu().sum_squares(x.g(), n);
    EXPECT_NEAR(got, ref, 1e-10 * std::max(ref, 1.0)) << "sum_squares n=" << n;
    cpu().scale(x.c(), -0.75f, n);
    gpu().scale(x.g(), -0.75f, n);
    EXPECT_EQ(x.gpu(), x.cpu) << "scale n=" << n;
  }
}

// ---- determinism: a second run gives the same bits --------------------------------------
TEST_F(CudaOpsTest, ReductionsAreDeterministic) {
  const int64_t N = 4096, C = 96, V = 40;
  FTwin dout(random_values(N * C, 140)), inp(random_values(N * C, 141)), w(random_values(C * C, 142));
  ITwin tokens(random_ints(N, 143, 0, int32_t(V)));
  FTwin m(random_values(N, 144)), r(random_values(N, 145, 0.5f, 2.0f)), g(random_values(C, 146));
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    FTwin dw(filled(C * C)), db(filled(C)), lw(filled(C));
    FTwin lb(filled(C)), dx(filled(N * C)), dwte(filled(V * C));
    cuda_ops().linear_backward(nullptr, dw.g(), db.g(), dout.g(), inp.g(), w.g(), N, C, C, false);
    cuda_ops().layernorm_backward(dx.g(), lw.g(), lb.g(), dout.g(), inp.g(), g.g(), m.g(), r.g(), N, C);
    cuda_ops().embedding_backward(dwte.g(), dout.g(), tokens.g(), 0, V, N, C);
    std::vector<float> all;
    for (FTwin* t : {&dw, &db, &lw, &lb, &dx, &dwte}) {
      const auto h = t->gpu();
      all.insert(all.end(), h.begin(), h.end());
    }
    all.push_back(float(cuda_ops().sum_squares(dout.g(), N * C)));
    if (run == 0)
      first = all;
    else
      EXPECT_EQ(all, first) << "a second run gave different bits";
  }
}

}  // namespace
}  // namespace occ::kernels
