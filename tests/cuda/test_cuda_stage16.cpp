// A whole GPT stage on the GPU in --bf16 (16-bit storage, cuBLASLt's GEMMs and
// epilogues, the chunked classifier, tensor-core or fused attention) against the
// CPU backend's bf16 emulation (fp32 storage rounded by the step): the reference
// numerics of a bf16 step. Both round the same tensors at the same points, so
// they differ by the order of sums (each able to move a rounded value by one bf16
// step) and, with flash attention, by P rounded to bf16 inside the kernel.
// Dropout is on: both draw the same masks. Without a visible GPU every test is SKIPPED.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/rng.h"
#include "cuda_twin.h"
#include "kernels/cuda/cuda_ops.h"
#include "model/gpt.h"

namespace occ::kernels {
namespace {

struct StepResult {
  double loss = 0.0;
  std::vector<float> grads, logits;
};

StepResult run_step(GptStage& stage, const std::vector<int32_t>& in, const std::vector<int32_t>& labels, int B, int T) {
  StageActivations acts = stage.make_activations();
  MicroBatch mb{in.data(), labels.data(), B, T, 3, 7, 1.0f / float(B * T)};
  stage.zero_grads();
  stage.forward(acts, mb, nullptr, nullptr, true);
  stage.backward(acts, mb, nullptr, nullptr);
  StepResult r;
  r.loss = stage.take_loss_sum() / double(B * T);
  r.grads = stage.grads().to_host();
  MicroBatch eval = mb;
  eval.keep_logits = true;
  stage.forward(acts, eval, nullptr, nullptr, false);
  stage.take_loss_sum();
  r.logits = stage.logits_to_host(acts);
  return r;
}

void check_bf16_stage(CudaAttention attention, const std::string& what) {
  GptConfig cfg;
  cfg.num_layers = 2;
  cfg.hidden_size = 128;
  cfg.num_attention_heads = 2;  // head dim 64: the tensor-core kernels run
  cfg.seq_length = cfg.max_position_embeddings = 96;
  cfg.vocab_size = 1000;
  const int B = 2, T = 96;
  ParallelLayout layout;
  SelfCommunicator self;
  std::vector<int32_t> in(size_t(B) * T), labels(size_t(B) * T);
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = int32_t(Philox::block(0x51A6E, 0, i)[0] % 1000u);
    labels[i] = int32_t(Philox::block(0x51A6E, 1, i)[0] % 1000u);
  }
  GptStage cpu(cfg, layout, self, 42, StageOptions{Device::Cpu, Recompute::None, Precision::Bf16});
  std::unique_ptr<Ops> ops = make_cuda_ops(attention);
  // A small classifier chunk, so that the GPU's chunked loss runs in several pieces.
  GptStage gpu(cfg, layout, self, 42, StageOptions{Device::Cuda, Recompute::None, Precision::Bf16, ops.get(), 24 * 1024});
  ASSERT_EQ(gpu.storage(), Precision::Bf16);
  const StepResult c = run_step(cpu, in, labels, B, T), g = run_step(gpu, in, labels, B, T);
  EXPECT_NEAR(g.loss, c.loss, 5e-3 * c.loss) << what << ": loss";
  expect_close(g.logits, c.logits, 2e-2, what + ": logits (keep_logits)");
  // Per tensor: bf16 activations carry ~2^-8 relative error per rounding; a gradient
  // collects a few of them through two layers.
  for (const auto& t : cpu.param_layout().tensors())
    expect_close(std::vector<float>(g.grads.begin() + t.offset, g.grads.begin() + t.offset + t.numel),
                 std::vector<float>(c.grads.begin() + t.offset, c.grads.begin() + t.offset + t.numel), 5e-2,
                 what + ": gradient of " + t.name);
  // The same step again on the GPU: bit for bit (no atomics anywhere).
  const StepResult g2 = run_step(gpu, in, labels, B, T);
  EXPECT_EQ(g2.loss, g.loss) << what;
  EXPECT_EQ(g2.grads, g.grads) << what << ": a second run's gradients differ";
}

TEST_F(CudaOpsTest, Bf16StageWithFlashAttentionMatchesTheCpuEmulation) {
  check_bf16_stage(CudaAttention::Flash, "flash");
}
TEST_F(CudaOpsTest, Bf16StageWithFusedAttentionMatchesTheCpuEmulation) {
  check_bf16_stage(CudaAttention::Fused, "fused");
}

}  // namespace
}  // namespace occ::kernels
