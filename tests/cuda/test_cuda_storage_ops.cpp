// The CUDA backend's non-GEMM kernels on 16-bit storage (and fp32) against the
// CPU reference (kernels/ops.h): the CPU computes in fp32 on the rounded inputs
// and the result is rounded to the format (core/precision.h), which is what a
// 16-bit kernel must store, up to summation order: element by element within
// one unit in the last place (expect_close_lp), exactly where no sum is
// involved. Dropout masks must be identical (the same zeros); the fused
// LayerNorm ops must agree with the CPU's composition of their parts. Shapes
// cover the vectorised paths (C = 768, 1600, 8192: one and several warps per
// row; 512, 1024, 2040, 2048: the widths whose staged column sums reach the
// shared-memory limit) and the scalar ones (C = 50, 770, 20000; misaligned
// tensors), with rows not a multiple of any block's. Without a visible GPU every test is SKIPPED.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "core/buffer.h"
#include "core/precision.h"
#include "core/tensor_buffer.h"
#include "kernels/ops.h"
#include "cuda_twin.h"

namespace occ::kernels {
namespace {

// Storage formats of the parameterised tests; the step's precision is the same.
class StorageTest : public CudaOpsTest, public ::testing::WithParamInterface<Precision> {
 protected:
  Precision p() const { return GetParam(); }
  std::string fmt() const { return precision_name(GetParam()); }
  std::string label() const { return std::string(" ") + precision_name(GetParam()); }
};

std::string shape(int64_t N, int64_t C) { return " N=" + std::to_string(N) + " C=" + std::to_string(C); }

// The dropout multipliers of [N, C] (0 or 1 / (1 - p), 1 without dropout), from the CPU reference.
std::vector<float> dropout_multipliers(const Dropout& d, int64_t N, int64_t T, int64_t C) {
  std::vector<float> m(size_t(N * C), 1.0f);
  cpu_ops().dropout_inplace(m.data(), d, N, T, C);
  return m;
}

// A view of a twin's first n - 1 values shifted by one element: 2 or 4 bytes
// off any 16-byte boundary, so the kernels take their scalar paths.
TensorRef shifted(StoredTwin& t) { return t.g() + 1; }

TEST_P(StorageTest, Gelu) {
  for (int64_t n : {int64_t(4096), int64_t(1003)}) {
    StoredTwin inp(random_values(n, 40, -5.0f, 5.0f), p()), dout(random_values(n, 41), p());
    StoredTwin out(filled(n), p()), dinp(filled(n), p());
    cpu().gelu_forward(out.c(), inp.c(), n);
    gpu().gelu_forward(out.g(), inp.g(), n);
    expect_close_lp(out.gpu(), round_values(out.cpu, p()), p(), 1, 1e-6, fmt() + " gelu_forward n=" + std::to_string(n));
    cpu().gelu_backward(dinp.c(), inp.c(), dout.c(), n);
    gpu().gelu_backward(dinp.g(), inp.g(), dout.g(), n);
    expect_close_lp(dinp.gpu(), round_values(dinp.cpu, p()), p(), 1, 1e-6, fmt() + " gelu_backward");
    // In place and misaligned (the scalar path): the same values.
    StoredTwin inplace(dout.cpu, p());
    gpu().gelu_backward(shifted(inplace), shifted(inp), shifted(inplace), n - 1);
    auto got = inplace.gpu();
    EXPECT_EQ(got[0], dout.cpu[0]) << "element before the view untouched";
    got.erase(got.begin());
    auto want = dinp.gpu();
    want.erase(want.begin());
    EXPECT_EQ(got, want) << fmt() << " gelu_backward: scalar and vector paths give the same bits";
  }
}

TEST_P(StorageTest, BiasDropoutAdd) {
  // (T, C, N): vectorised C, odd C, N not a multiple of T; 1024 and 2048: the dropout
  // gradient's staged bias-gradient sums fill its 48 KiB of shared memory.
  for (auto [T, C, N] : {std::tuple<int64_t, int64_t, int64_t>{7, 768, 21}, {7, 50, 21}, {5, 770, 11}, {4, 1024, 9},
                         {3, 2048, 6}}) {
    for (float prob : {0.0f, 0.1f}) {
      for (bool x_fp32 : {false, true}) {
        const Dropout d = make_dropout(prob);
        const std::string tag = label() + shape(N, C) + " p=" + std::to_string(prob) + " x_fp32=" +
                                std::to_string(x_fp32);
        // x as a TP all-reduce's fp32 sum: unrounded values on both backends.
        StoredTwin x(random_values(N * C, 50), x_fp32 ? Precision::Fp32 : p(), x_fp32 ? Precision::Fp32 : p());
        StoredTwin bias(random_values(C, 51), p()), residual(random_values(N * C, 52), p());
        StoredTwin out(filled(N * C), p()), zero(filled(N * C), p());
        cpu().bias_dropout_add_forward(out.c(), residual.c(), x.c(), bias.c(), d, N, T, C);
        gpu().bias_dropout_add_forward(out.g(), residual.g(), x.g(), bias.g(), d, N, T, C);
        expect_close_lp(out.gpu(), round_values(out.cpu, p()), p(), 1, 0.0, "bias_dropout_add_forward" + tag);
        if (d.active()) {  // with a zero residual the output is zero exactly where dropped
          StoredTwin masked(filled(N * C), p());
          cpu().bias_dropout_add_forward(masked.c(), zero.c(), x.c(), bias.c(), d, N, T, C);
          gpu().bias_dropout_add_forward(masked.g(), zero.g(), x.g(), bias.g(), d, N, T, C);
          expect_same_zeros(masked.gpu(), masked.cpu, "bias_dropout_add mask" + tag);
        }
        if (x_fp32) continue;
        // Backward, out of place and in place; dbias accumulates the fp32 dx.
        StoredTwin dout(random_values(N * C, 53), p()), dx(filled(N * C), p());
        FTwin dbias(random_values(C, 54));
        cpu().bias_dropout_add_backward(dx.c(), dbias.c(), dout.c(), d, N, T, C);
        gpu().bias_dropout_add_backward(dx.g(), dbias.g(), dout.g(), d, N, T, C);
        expect_close_lp(dx.gpu(), round_values(dx.cpu, p()), p(), 0, 0.0, "bias_dropout_add_backward dx" + tag);
        expect_close(dbias, 1e-5, "bias_dropout_add_backward dbias" + tag);
        if (d.active()) expect_same_zeros(dx.gpu(), dx.cpu, "bias_dropout_add_backward mask" + tag);
        cpu().bias_dropout_add_backward(dout.c(), dbias.c(), dout.c(), d, N, T, C);
        gpu().bias_dropout_add_backward(dout.g(), dbias.g(), dout.g(), d, N, T, C);
        expect_close_lp(dout.gpu(), round_values(dout.cpu, p()), p(), 0, 0.0, "in place dx" + tag);
        expect_close(dbias, 1e-5, "in place dbias" + tag);
        // Without dbias (the dropout-only path; the CPU's needs one: a throwaway).
        StoredTwin dout2(random_values(N * C, 55), p()), dx2(filled(N * C), p());
        std::vector<float> unused(static_cast<size_t>(C));
        gpu().bias_dropout_add_backward(dx2.g(), nullptr, dout2.g(), d, N, T, C);
        cpu().bias_dropout_add_backward(dx2.c(), unused.data(), dout2.c(), d, N, T, C);
        expect_close_lp(dx2.gpu(), round_values(dx2.cpu, p()), p(), 0, 0.0, "dx without dbias" + tag);
      }
    }
  }
}

TEST_P(StorageTest, DropoutInplaceMaskIsBitIdentical) {
  for (auto [T, C, N] : {std::tuple<int64_t, int64_t, int64_t>{7, 13, 21}, {64, 128, 128}, {3, 768, 7}}) {
    const Dropout d = make_dropout(0.1f, 0xABCDEF, 11);
    StoredTwin x(filled(N * C, 1.0f), p());
    cpu().dropout_inplace(x.c(), d, N, T, C);
    gpu().dropout_inplace(x.g(), d, N, T, C);
    EXPECT_EQ(x.gpu(), round_values(x.cpu, p())) << fmt() << " dropout_inplace" << shape(N, C);
    expect_same_zeros(x.gpu(), x.cpu, "dropout_inplace");
  }
}

// (N, C): one warp per row (768), several (1600, 8192: 2 and 8 warps forward),
// GPT-2 medium's and Llama's widths (1024, 2048: the backward's row groups
// stage their column sums in shared memory up to the 48 KiB limit, less the
// kernel's static bytes), the scalar path (50, 770: C not a multiple of the
// pack; 20000: a row too wide for the backward's registers in 16 bits, and for
// both in fp32).
const std::pair<int64_t, int64_t> kLayerNormShapes[] = {{33, 768}, {10, 50},  {7, 770},  {5, 1600},
                                                        {9, 1024}, {6, 2048}, {3, 8192}, {2, 20000}};

TEST_P(StorageTest, LayerNorm) {
  for (auto [N, C] : kLayerNormShapes) {
    const std::string tag = label() + shape(N, C);
    StoredTwin inp(random_values(N * C, 30, -2.0f, 3.0f), p()), w(random_values(C, 31), p()), b(random_values(C, 32), p());
    StoredTwin out(filled(N * C), p());
    FTwin mean(filled(N)), rstd(filled(N));
    cpu().layernorm_forward(out.c(), mean.c(), rstd.c(), inp.c(), w.c(), b.c(), N, C, 1e-5f);
    gpu().layernorm_forward(out.g(), mean.g(), rstd.g(), inp.g(), w.g(), b.g(), N, C, 1e-5f);
    expect_close_lp(out.gpu(), round_values(out.cpu, p()), p(), 1, 1e-5, "layernorm out" + tag);
    expect_close(mean, 1e-5, "layernorm mean" + tag);
    expect_close(rstd, 1e-5, "layernorm rstd" + tag);
    // Backward from the CPU's statistics; gradients accumulate onto non-zero values.
    FTwin m2(mean.cpu), r2(rstd.cpu);
    StoredTwin dout(random_values(N * C, 33), p()), dinp(random_values(N * C, 34), p());
    FTwin dw(random_values(C, 35)), db(random_values(C, 36));
    cpu().layernorm_backward(dinp.c(), dw.c(), db.c(), dout.c(), inp.c(), w.c(), m2.c(), r2.c(), N, C);
    gpu().layernorm_backward(dinp.g(), dw.g(), db.g(), dout.g(), inp.g(), w.g(), m2.g(), r2.g(), N, C);
    expect_close_lp(dinp.gpu(), round_values(dinp.cpu, p()), p(), 1, 1e-5, "layernorm dinp" + tag);
    expect_close(dw, 1e-5, "layernorm dw" + tag);
    expect_close(db, 1e-5, "layernorm db" + tag);
    // Parameter gradients only (the head's final LayerNorm without an input gradient).
    FTwin dw2(random_values(C, 35)), db2(random_values(C, 36));
    std::vector<float> dinp_cpu(size_t(N * C));
    cpu().layernorm_backward(dinp_cpu.data(), dw2.c(), db2.c(), dout.c(), inp.c(), w.c(), m2.c(), r2.c(), N, C);
    gpu().layernorm_backward(nullptr, dw2.g(), db2.g(), dout.g(), inp.g(), w.g(), m2.g(), r2.g(), N, C);
    expect_close(dw2, 1e-5, "layernorm dw without dinp" + tag);
    expect_close(db2, 1e-5, "layernorm db without dinp" + tag);
  }
}

// The fused pairs against the CPU's composition (and the GPU's own parts):
// (N, T, C) with vectorised and odd C, dropout on and off, x in the storage
// format or fp32 (a TP all-reduce's sum). 512, 1024, 2040 and 2048 are the
// widths whose three staged column sums (dw, db, dbias) once filled the whole
// 48 KiB beside the kernel's static bytes: a launch the GPU refuses.
const std::tuple<int64_t, int64_t, int64_t> kFusedShapes[] = {{21, 7, 768}, {11, 5, 50},  {9, 4, 770},   {6, 3, 1600},
                                                              {8, 4, 512},  {8, 4, 1024}, {6, 3, 2040}, {6, 3, 2048}};

void check_fused_forward(Ops& cpu, Ops& gpu, Precision p, Precision storage, bool x_fp32) {
  for (auto [N, T, C] : kFusedShapes) {
    for (float prob : {0.0f, 0.1f}) {
      const Dropout d = make_dropout(prob, 0x1234, 2);
      const std::string tag = std::string(" ") + precision_name(p) + " in " + precision_name(storage) + shape(N, C) +
                              " p=" + std::to_string(prob) + " x_fp32=" + std::to_string(x_fp32);
      StoredTwin residual(random_values(N * C, 60, -2.0f, 2.0f), p, storage), bias(random_values(C, 62), p, storage);
      StoredTwin x(random_values(N * C, 61), x_fp32 ? Precision::Fp32 : p, x_fp32 ? Precision::Fp32 : storage);
      StoredTwin w(random_values(C, 63), p, storage), b(random_values(C, 64), p, storage);
      StoredTwin resid_out(filled(N * C, 7.0f), p, storage), ln_out(filled(N * C, 7.0f), p, storage);
      FTwin mean(filled(N)), rstd(filled(N));
      cpu.bias_dropout_add_layernorm_forward(resid_out.c(), ln_out.c(), mean.c(), rstd.c(), residual.c(), x.c(),
                                             bias.c(), d, w.c(), b.c(), N, T, C, 1e-5f, p);
      gpu.bias_dropout_add_layernorm_forward(resid_out.g(), ln_out.g(), mean.g(), rstd.g(), residual.g(), x.g(),
                                             bias.g(), d, w.g(), b.g(), N, T, C, 1e-5f, p);
      const std::vector<float> resid_gpu = resid_out.gpu();
      expect_close_lp(resid_gpu, resid_out.cpu, p, 1, 0.0, "fused forward residual_out" + tag);
      if (d.active()) {  // the mask: where dropped, residual_out is the residual itself
        const std::vector<float> m = dropout_multipliers(d, N, T, C);
        size_t wrong = 0;
        for (size_t i = 0; i < m.size(); ++i) wrong += m[i] == 0.0f && resid_gpu[i] != residual.cpu[i];
        EXPECT_EQ(wrong, 0u) << "fused forward mask" << tag;
      }
      expect_close(mean, 1e-5, "fused forward mean" + tag);
      expect_close(rstd, 1e-5, "fused forward rstd" + tag);
      // LayerNorm of the GPU's own residual_out, on the CPU, rounded: within one unit.
      std::vector<float> ln_ref(static_cast<size_t>(N * C)), m_ref(static_cast<size_t>(N)), r_ref(static_cast<size_t>(N));
      cpu.layernorm_forward(ln_ref.data(), m_ref.data(), r_ref.data(), resid_gpu.data(), w.c(), b.c(), N, C, 1e-5f);
      expect_close_lp(ln_out.gpu(), round_values(ln_ref, p), p, 1, 1e-5, "fused forward ln_out" + tag);
    }
  }
}

// LayerNorm's (rms false) or RMSNorm's (no mean, no db) fused backward.
void check_fused_backward(Ops& cpu, Ops& gpu, Precision p, Precision storage, bool rms = false) {
  for (auto [N, T, C] : kFusedShapes) {
    for (float prob : {0.0f, 0.1f}) {
      for (bool with_dbias : {true, false}) {
        const Dropout d = make_dropout(prob, 0x4321, 3);
        const std::string tag = std::string(rms ? " rms " : " ") + precision_name(p) + " in " +
                                precision_name(storage) + shape(N, C) + " p=" + std::to_string(prob) +
                                " dbias=" + std::to_string(with_dbias);
        StoredTwin inp(random_values(N * C, 70, -2.0f, 2.0f), p, storage), w(random_values(C, 71), p, storage);
        StoredTwin dout(random_values(N * C, 72), p, storage), dresid(random_values(N * C, 73), p, storage);
        StoredTwin dx(filled(N * C, 7.0f), p, storage);
        FTwin mean(random_values(N, 74, -0.2f, 0.2f)), rstd(random_values(N, 75, 0.5f, 2.0f));
        FTwin dbias(random_values(C, 76)), dw(random_values(C, 77)), db(random_values(C, 78));
        const std::vector<float> dbias0 = dbias.cpu;
        if (rms) {
          cpu.rmsnorm_dropout_backward(dresid.c(), dx.c(), with_dbias ? dbias.c() : nullptr, dw.c(), dout.c(), inp.c(),
                                       w.c(), rstd.c(), d, N, T, C, p);
          gpu.rmsnorm_dropout_backward(dresid.g(), dx.g(), with_dbias ? dbias.g() : nullptr, dw.g(), dout.g(), inp.g(),
                                       w.g(), rstd.g(), d, N, T, C, p);
        } else {
          cpu.layernorm_dropout_backward(dresid.c(), dx.c(), with_dbias ? dbias.c() : nullptr, dw.c(), db.c(),
                                         dout.c(), inp.c(), w.c(), mean.c(), rstd.c(), d, N, T, C, p);
          gpu.layernorm_dropout_backward(dresid.g(), dx.g(), with_dbias ? dbias.g() : nullptr, dw.g(), db.g(),
                                         dout.g(), inp.g(), w.g(), mean.g(), rstd.g(), d, N, T, C, p);
        }
        const std::vector<float> dresid_gpu = dresid.gpu(), dx_gpu = dx.gpu();
        expect_close_lp(dresid_gpu, dresid.cpu, p, 1, 1e-5, "fused backward dresid" + tag);
        expect_close(dw, 1e-5, "fused backward dw" + tag);
        expect_close(db, 1e-5, "fused backward db" + tag);
        // dx and dbias from the GPU's own dresid: dx = dresid * m rounded, exactly;
        // dbias += the column sums of the unrounded products.
        const std::vector<float> m = dropout_multipliers(d, N, T, C);
        std::vector<float> dx_ref(size_t(N * C));
        std::vector<double> sums(size_t(C), 0.0);
        for (int64_t i = 0; i < N * C; ++i) {
          const float v = d.active() ? dresid_gpu[size_t(i)] * m[size_t(i)] : dresid_gpu[size_t(i)];
          dx_ref[size_t(i)] = round_to(p, v);
          sums[size_t(i % C)] += v;
        }
        EXPECT_EQ(dx_gpu, dx_ref) << "fused backward dx = dropout'(dresid), rounded" << tag;
        if (d.active()) expect_same_zeros(dx_gpu, dx.cpu, "fused backward mask" + tag);
        std::vector<float> dbias_ref = dbias0;
        if (with_dbias)
          for (int64_t c = 0; c < C; ++c) dbias_ref[size_t(c)] = float(double(dbias0[size_t(c)]) + sums[size_t(c)]);
        expect_close(dbias.gpu(), dbias_ref, 1e-5, "fused backward dbias" + tag);
      }
    }
  }
}

TEST_P(StorageTest, FusedLayerNormForwardMatchesComposition) {
  for (bool x_fp32 : {false, true}) check_fused_forward(cpu(), gpu(), p(), p(), x_fp32);
}

TEST_P(StorageTest, FusedLayerNormBackwardMatchesComposition) { check_fused_backward(cpu(), gpu(), p(), p()); }

// RMSNorm (Llama) takes the same kernels with the mean and db left out: the same
// three-sum launch at every width.
TEST_P(StorageTest, FusedRmsNormBackwardMatchesComposition) { check_fused_backward(cpu(), gpu(), p(), p(), true); }

// fp32 tensors of a --bf16 / --fp16 step (the CPU's storage) on the GPU: the
// kernels round what they store to p, as the 16-bit storage does.
TEST_F(CudaOpsTest, FusedLayerNormRoundsFp32StorageToThePrecision) {
  for (Precision p : {Precision::Bf16, Precision::Fp16}) {
    check_fused_forward(cpu(), gpu(), p, Precision::Fp32, false);
    check_fused_backward(cpu(), gpu(), p, Precision::Fp32);
  }
}

// The MLP's linear + GeLU and its backward with fp32 storage in a 16-bit step (p
// bf16 / fp16): the products copy their operands to the format in the backend's
// operand buffer, so the GeLU's intermediate (the pre-activation, the input
// gradient) lives in the output tensors, as on the CPU, never in that buffer.
// Against the CPU: the products are exact in fp32 on both (values of the format),
// so only summation order differs, then one rounding to p.
TEST_F(CudaOpsTest, LinearGeluWithFp32StorageIn16BitSteps) {
  const int64_t N = 64, C = 96, F = 384;  // [N, C] -> [N, F] (h -> 4h), and back
  for (Precision p : {Precision::Bf16, Precision::Fp16}) {
    const std::string tag = std::string(" fp32 storage, ") + precision_name(p);
    const Precision s = Precision::Fp32;
    StoredTwin inp(random_values(N * C, 160), p, s), w(random_values(F * C, 161, -0.2f, 0.2f), p, s);
    StoredTwin b(random_values(F, 162), p, s), pre(filled(N * F, 5.0f), p, s), out(filled(N * F, 5.0f), p, s);
    cpu().linear_gelu_forward(pre.c(), out.c(), inp.c(), w.c(), b.c(), N, C, F, p);
    gpu().linear_gelu_forward(pre.g(), out.g(), inp.g(), w.g(), b.g(), N, C, F, p);
    expect_close_lp(pre.gpu(), pre.cpu, p, 1, 1e-5, "linear_gelu_forward pre" + tag);
    expect_close_lp(out.gpu(), out.cpu, p, 1, 1e-5, "linear_gelu_forward out" + tag);
    // Backward through the 4h -> h projection w2 [C, F] and the GeLU, from the CPU's forward.
    StoredTwin act(out.cpu, p, s), pre2(pre.cpu, p, s), w2(random_values(C * F, 163, -0.2f, 0.2f), p, s);
    StoredTwin dout(random_values(N * C, 164), p, s), dpre(filled(N * F, 5.0f), p, s);
    FTwin dbias(random_values(F, 165)), dw(random_values(C * F, 166));
    cpu().linear_backward_gelu(dpre.c(), dbias.c(), dw.c(), dout.c(), act.c(), pre2.c(), w2.c(), N, F, C, p);
    gpu().linear_backward_gelu(dpre.g(), dbias.g(), dw.g(), dout.g(), act.g(), pre2.g(), w2.g(), N, F, C, p);
    expect_close_lp(dpre.gpu(), dpre.cpu, p, 1, 1e-5, "linear_backward_gelu dpre" + tag);
    expect_close(dbias, 1e-5, "linear_backward_gelu dpre_bias" + tag);
    expect_close(dw, 1e-5, "linear_backward_gelu dw" + tag);
  }
}

TEST_P(StorageTest, FusedLayerNormBackwardIsDeterministic) {
  const int64_t N = 4099, T = 64, C = 768;  // enough rows for every group of every block
  const Dropout d = make_dropout(0.1f, 0x99, 1);
  StoredTwin inp(random_values(N * C, 80), p()), w(random_values(C, 81), p()), dout(random_values(N * C, 82), p());
  FTwin mean(random_values(N, 83, -0.1f, 0.1f)), rstd(random_values(N, 84, 0.5f, 2.0f));
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    StoredTwin dresid(random_values(N * C, 85), p()), dx(filled(N * C), p());
    FTwin dbias(filled(C)), dw(filled(C)), db(filled(C));
    gpu().layernorm_dropout_backward(dresid.g(), dx.g(), dbias.g(), dw.g(), db.g(), dout.g(), inp.g(), w.g(), mean.g(),
                                     rstd.g(), d, N, T, C, p());
    std::vector<float> all = dresid.gpu();
    for (const std::vector<float>& v : {dx.gpu(), dbias.gpu(), dw.gpu(), db.gpu()}) all.insert(all.end(), v.begin(), v.end());
    if (run == 0)
      first = all;
    else
      EXPECT_EQ(all, first) << fmt() << ": a second run gave different bits";
  }
}

// ---- embeddings: sums in the CPU's order, so the bits are the CPU's ----------------------
TEST_P(StorageTest, Embeddings) {
  for (int64_t C : {int64_t(768), int64_t(33)}) {
    const int64_t N = 301, V = 64, v0 = 20, T = 43;
    ITwin tokens(random_ints(size_t(N), 86, 0, int32_t(v0 + V + 30)));  // some outside the shard
    StoredTwin wte(random_values(V * C, 87), p()), wpe(random_values(T * C, 88), p());
    for (Precision out_format : {Precision::Fp32, p()}) {  // the model embeds into an fp32 sum
      const std::string tag = label() + " wte into " + precision_name(out_format) + " C=" + std::to_string(C);
      StoredTwin out(filled(N * C, 5.0f), out_format);
      cpu().embedding_forward(out.c(), tokens.c(), wte.c(), v0, V, N, C);
      gpu().embedding_forward(out.g(), tokens.g(), wte.g(), v0, V, N, C);
      EXPECT_EQ(out.gpu(), out.cpu) << "embedding_forward" << tag;
      cpu().position_forward(out.c(), wpe.c(), N, T, C);
      gpu().position_forward(out.g(), wpe.g(), N, T, C);
      EXPECT_EQ(out.gpu(), round_values(out.cpu, out_format)) << "position_forward" << tag;
    }
    StoredTwin dout(random_values(N * C, 89), p());
    FTwin dwte(random_values(V * C, 90)), dwpe(random_values(T * C, 91));
    cpu().embedding_backward(dwte.c(), dout.c(), tokens.c(), v0, V, N, C);
    gpu().embedding_backward(dwte.g(), dout.g(), tokens.g(), v0, V, N, C);
    EXPECT_EQ(dwte.gpu(), dwte.cpu) << fmt() << " embedding_backward C=" << C;
    cpu().position_backward(dwpe.c(), dout.c(), N, T, C);
    gpu().position_backward(dwpe.g(), dout.g(), N, T, C);
    EXPECT_EQ(dwpe.gpu(), dwpe.cpu) << fmt() << " position_backward C=" << C;
  }
}

// ---- cross-entropy -----------------------------------------------------------------------
TEST_P(StorageTest, CrossEntropy) {
  // V = 50304 (GPT-2's padded vocabulary: packs), 1031 (odd: scalar), 1.
  for (auto [N, V] : {std::pair<int64_t, int64_t>{8, 50304}, {13, 1031}, {3, 1}}) {
    for (float grad_scale : {0.0f, 0.125f}) {
      const std::string tag = label() + " N=" + std::to_string(N) + " V=" + std::to_string(V) + " scale=" +
                              std::to_string(grad_scale);
      ITwin labels(random_ints(N, 110, 0, int32_t(V)));
      StoredTwin logits(random_values(N * V, 111, -8.0f, 8.0f), p());
      const std::vector<float> before = logits.cpu;
      const double loss_cpu = loss_sum(
          cpu(), [&](double* l) { cpu().cross_entropy_fused(logits.c(), labels.c(), grad_scale, N, V, l); });
      const double loss_gpu = loss_sum(
          gpu(), [&](double* l) { gpu().cross_entropy_fused(logits.g(), labels.g(), grad_scale, N, V, l); });
      EXPECT_NEAR(loss_gpu, loss_cpu, 1e-5 * std::max(std::fabs(loss_cpu), 1e-3)) << "fused loss" << tag;
      if (grad_scale == 0.0f)
        EXPECT_EQ(logits.gpu(), before) << "fused: logits untouched without a gradient" << tag;
      else
        expect_close_lp(logits.gpu(), round_values(logits.cpu, p()), p(), 1, 1e-5, "fused gradient" + tag);
    }
  }
  // Vocab-parallel steps on a shard [500, 1500) of 1000 values (packs) and [500, 1531) (scalar).
  for (int64_t V : {int64_t(1000), int64_t(1031)}) {
    const int64_t N = 13, v0 = 500;
    const std::string tag = label() + " V=" + std::to_string(V);
    ITwin labels(random_ints(N, 100, 0, 2000));
    StoredTwin logits(random_values(N * V, 101, -6.0f, 6.0f), p());
    FTwin mx(filled(N)), sum(filled(N)), target(filled(N));
    cpu().row_max(mx.c(), logits.c(), N, V);
    gpu().row_max(mx.g(), logits.g(), N, V);
    EXPECT_EQ(mx.gpu(), mx.cpu) << "row_max" << tag;
    cpu().row_sum_exp(sum.c(), logits.c(), mx.c(), N, V);
    gpu().row_sum_exp(sum.g(), logits.g(), mx.g(), N, V);
    expect_close(sum, 1e-5, "row_sum_exp" + tag);
    cpu().target_logit(target.c(), logits.c(), labels.c(), v0, N, V);
    gpu().target_logit(target.g(), logits.g(), labels.g(), v0, N, V);
    EXPECT_EQ(target.gpu(), target.cpu) << "target_logit" << tag;
    FTwin sum_ref(sum.cpu);  // the backward from the same statistics on both sides
    cpu().cross_entropy_backward_inplace(logits.c(), mx.c(), sum_ref.c(), labels.c(), v0, 0.25f, N, V);
    gpu().cross_entropy_backward_inplace(logits.g(), mx.g(), sum_ref.g(), labels.g(), v0, 0.25f, N, V);
    expect_close_lp(logits.gpu(), round_values(logits.cpu, p()), p(), 1, 1e-6, "cross_entropy_backward" + tag);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, StorageTest, ::testing::Values(Precision::Bf16, Precision::Fp16, Precision::Fp32),
                         [](const ::testing::TestParamInfo<Precision>& info) {
                           return std::string(precision_name(info.param));
                         });

// ---- optimizer ---------------------------------------------------------------------------
// Spans of every kind (empty, shorter than a pack, a chunk and one more,
// unaligned offsets, more of them than one launch carries), summed in one pass.
TEST_F(CudaOpsTest, SumSquaresSpansIsOnePassAndDeterministic) {
  const int64_t n = 300000;
  const std::vector<float> values = random_values(size_t(n), 130, -3.0f, 3.0f);
  std::vector<Span> spans;
  const int64_t sizes[] = {0, 1, 3, 5, 17, 1000, 16384, 16385, 40000, 7};
  for (int i = 0; i < 250; ++i) {
    const int64_t numel = sizes[i % 10], offset = (int64_t(i) * 7919) % (n - numel);
    spans.push_back({offset, numel});
  }
  FTwin x(values);
  const double ref = cpu().sum_squares_spans(x.c(), spans.data(), int64_t(spans.size()));
  const double got = gpu().sum_squares_spans(x.g(), spans.data(), int64_t(spans.size()));
  EXPECT_NEAR(got, ref, 1e-12 * ref) << "sum_squares_spans against the CPU's per-span sums";
  EXPECT_EQ(gpu().sum_squares_spans(x.g(), spans.data(), int64_t(spans.size())), got) << "a second run";
  // The same values one float further on: other load paths, the same order, the same bits.
  std::vector<float> moved(1, 0.0f);
  moved.insert(moved.end(), values.begin(), values.end());
  FTwin y(moved);
  EXPECT_EQ(gpu().sum_squares_spans(y.g() + 1, spans.data(), int64_t(spans.size())), got) << "misaligned base";
  EXPECT_EQ(gpu().sum_squares_spans(x.g(), spans.data(), 0), 0.0);
  const Span one{5, 100003};
  EXPECT_NEAR(gpu().sum_squares_spans(x.g(), &one, 1), cpu().sum_squares(x.c() + 5, 100003), 1e-12 * ref);
}

TEST_F(CudaOpsTest, AdamWAndScaleVectorAndScalarPathsAgreeBitwise) {
  const int64_t n = 10007;
  const std::vector<float> p0 = random_values(n + 1, 120), g0 = random_values(n + 1, 121, -0.1f, 0.1f);
  const std::vector<float> m0 = random_values(n + 1, 122, -0.01f, 0.01f), v0 = random_values(n + 1, 123, 0.0f, 1e-3f);
  std::vector<uint8_t> decay_host(size_t(n + 1));
  for (int64_t i = 0; i <= n; ++i) decay_host[size_t(i)] = (i % 3) != 0;
  const AdamWStep step{3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f / (1.0f - 0.9f * 0.9f), 1.0f / (1.0f - 0.95f * 0.95f)};
  std::vector<float> results[2];
  for (int shift = 0; shift < 2; ++shift) {  // 0: float4 packs, 1: one element off (scalar)
    FTwin params(p0), grads(g0), m(m0), v(v0);
    DeviceBuffer<uint8_t> decay(Device::Cuda);
    decay.assign_from_host(decay_host);
    // Element i of the run sits at index i + shift; the values there are the same.
    if (shift) {
      for (FTwin* t : {&params, &grads, &m, &v}) {
        std::vector<float> h = t->cpu;
        h.insert(h.begin(), 0.0f);
        h.pop_back();
        t->dev.assign_from_host(h);
      }
      std::vector<uint8_t> d = decay_host;
      d.insert(d.begin(), 0);
      d.pop_back();
      decay.assign_from_host(d);
    }
    gpu().adamw_update(params.g() + shift, grads.g() + shift, m.g() + shift, v.g() + shift, decay.data() + shift, n,
                       step);
    gpu().scale(grads.g() + shift, -0.75f, n);
    for (FTwin* t : {&params, &m, &v, &grads}) {
      const std::vector<float> h = t->gpu();
      results[shift].insert(results[shift].end(), h.begin() + shift, h.begin() + shift + n);
    }
  }
  EXPECT_EQ(results[1], results[0]);
}

}  // namespace
}  // namespace occ::kernels
