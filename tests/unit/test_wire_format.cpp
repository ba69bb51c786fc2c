// The wire in the step's format (core/wire_format.h): which format each class
// travels in, the CPU backend's packing to and from 16 bits, the collectives'
// conversions (parallel/wire_collectives.h) and the host-staged path's bytes.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "comm/host_staged_communicator.h"
#include "core/wire_format.h"
#include "kernels/ops.h"
#include "parallel/wire_collectives.h"
#include "plan/model_cost.h"
#include "train/metrics.h"

namespace occ {
namespace {

TEST(WireFormats, FollowTheStepUnlessTheFlagsSayOtherwise) {
  const WireFormats fp32 = WireFormats::for_run(Precision::Fp32, false, false, false);
  EXPECT_EQ(fp32.activations, Precision::Fp32);
  EXPECT_EQ(fp32.activation_sums, Precision::Fp32);
  EXPECT_EQ(fp32.parameters, Precision::Fp32);
  EXPECT_EQ(fp32.gradients, Precision::Fp32);
  const WireFormats bf16 = WireFormats::for_run(Precision::Bf16, false, false, false);
  EXPECT_EQ(bf16.activations, Precision::Bf16);
  EXPECT_EQ(bf16.activation_sums, Precision::Bf16);
  EXPECT_EQ(bf16.parameters, Precision::Bf16);
  EXPECT_EQ(bf16.gradients, Precision::Fp32) << "Megatron's --bf16 reduces gradients in fp32";
  const WireFormats fp16 = WireFormats::for_run(Precision::Fp16, true, true, false);
  EXPECT_EQ(fp16.activations, Precision::Fp16);
  EXPECT_EQ(fp16.activation_sums, Precision::Fp32) << "--tp-reduce-in-fp32";
  EXPECT_EQ(fp16.gradients, Precision::Bf16) << "--grad-reduce-in-bf16 is bf16 in an fp16 step too";
  const WireFormats old = WireFormats::for_run(Precision::Bf16, false, true, true);
  EXPECT_EQ(old.activations, Precision::Fp32) << "--debug-fp32-wire";
  EXPECT_EQ(old.gradients, Precision::Fp32);
  EXPECT_EQ(wire_value_bytes(Precision::Bf16), 2u);
  EXPECT_EQ(wire_value_bytes(Precision::Fp32), 4u);
}

TEST(WireFormats, MetricsNameEachClass) {
  const nlohmann::json w = wire_json(WireFormats::for_run(Precision::Bf16, true, false, false), true);
  EXPECT_EQ(w["pp_fwd"], "bf16");
  EXPECT_EQ(w["pp_bwd"], "bf16");
  EXPECT_EQ(w["tp"], "bf16, sums fp32");
  EXPECT_EQ(w["dp"], "fp32 gradients, bf16 parameters");
  EXPECT_EQ(w["emb"], "fp32");
  EXPECT_EQ(wire_json(WireFormats::for_run(Precision::Bf16, false, true, false), false)["dp"], "bf16");
  EXPECT_EQ(wire_json(WireFormats{}, true)["dp"], "fp32");
}

TEST(CpuOps, PacksToSixteenBitsAndBackAsCorePrecisionDefines) {
  kernels::Ops& ops = kernels::ops_for(Device::Cpu);
  const std::vector<float> x{1.0f, -2.5f, 1.00390625f /* a bf16 tie: to even */, 3.14159f, 65520.0f, 0.0f, -0.0f};
  for (Precision p : {Precision::Bf16, Precision::Fp16}) {
    std::vector<uint16_t> packed(x.size());
    ops.copy(TensorRef(packed.data(), p), x.data(), int64_t(x.size()));
    std::vector<float> back(x.size());
    ops.copy(back.data(), ConstTensorRef(packed.data(), p), int64_t(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(packed[i], sixteen_bits(p, x[i])) << precision_name(p) << " " << x[i];
      const float rounded = round_to(p, x[i]);
      EXPECT_EQ(std::memcmp(&back[i], &rounded, 4), 0)
          << precision_name(p) << " " << x[i] << ": unpacking widens the rounded value exactly";
    }
    std::vector<uint16_t> copy(x.size());
    ops.copy(TensorRef(copy.data(), p), ConstTensorRef(packed.data(), p), int64_t(x.size()));
    EXPECT_EQ(copy, packed) << "same format: the bytes";
  }
  std::vector<uint16_t> a(2), b(2);
  EXPECT_THROW(ops.copy(TensorRef(a.data(), Precision::Bf16), ConstTensorRef(b.data(), Precision::Fp16), 2), Error);
}

// A two-rank group that records the format it was given and acts as if the
// other rank held zeros (so a sum is this rank's values, as they travelled).
class FormatRecorder final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void allreduce_sum(TensorRef data, size_t count, Traffic) override {
    seen = data.format();
    seen_count = count;
  }
  void allreduce_max(float*, size_t, Traffic) override {}
  void allgather(ConstTensorRef in, TensorRef out, size_t count, Traffic) override {
    seen = in.format();
    seen_count = count;
    const size_t e = element_bytes(in.format());
    std::memmove(out.data(), in.data(), count * e);
    std::memset(static_cast<char*>(out.data()) + count * e, 0, count * e);
  }
  void reduce_scatter(ConstTensorRef in, TensorRef out, size_t count, Traffic) override {
    seen = in.format();
    seen_count = count;
    std::memmove(out.data(), in.data(), count * element_bytes(in.format()));
  }
  Precision seen = Precision::Fp32;
  size_t seen_count = 0;
};

TEST(WireCollectives, ConvertToTheWireAndBack) {
  kernels::Ops& ops = kernels::ops_for(Device::Cpu);
  FormatRecorder comm;
  WireScratch scratch(Device::Cpu);
  std::vector<float> x{1.0f, 3.14159f, -2.0f};
  wire_allreduce_sum(comm, ops, x.data(), 3, Precision::Bf16, Traffic::TensorParallel, scratch);
  EXPECT_EQ(comm.seen, Precision::Bf16);
  EXPECT_EQ(comm.seen_count, 3u);
  EXPECT_EQ(x[1], round_bf16(3.14159f)) << "the value travelled in bf16";
  EXPECT_EQ(x[0], 1.0f);
  std::vector<float> y{3.14159f};
  wire_allreduce_sum(comm, ops, y.data(), 1, Precision::Fp32, Traffic::TensorParallel, scratch);
  EXPECT_EQ(comm.seen, Precision::Fp32);
  EXPECT_EQ(y[0], 3.14159f) << "an fp32 wire moves the tensor itself";
  // The pipeline's all-gather in place (this rank's slice inside the whole).
  std::vector<float> full{0.0f, 0.0f, 1.5f, 2.0f};
  wire_allgather(comm, ops, full.data(), full.data() + 2, 2, Precision::Fp16, Traffic::TensorParallel, scratch);
  EXPECT_EQ(comm.seen, Precision::Fp16);
  EXPECT_EQ(full, (std::vector<float>{1.5f, 2.0f, 0.0f, 0.0f}));
  std::vector<float> local(2);
  const std::vector<float> blocks{0.25f, 0.5f, 7.0f, 8.0f};
  wire_reduce_scatter(comm, ops, local.data(), blocks.data(), 2, Precision::Bf16, Traffic::TensorParallel, scratch);
  EXPECT_EQ(comm.seen, Precision::Bf16);
  EXPECT_EQ(local, (std::vector<float>{0.25f, 0.5f}));
  // One rank: nothing travels, nothing is rounded.
  SelfCommunicator self;
  std::vector<float> z{3.14159f};
  wire_allreduce_sum(self, ops, z.data(), 1, Precision::Bf16, Traffic::TensorParallel, scratch);
  EXPECT_EQ(z[0], 3.14159f);
}

TEST(WireCollectives, HostStagedCopiesTheWiresBytes) {
  // A 16-bit all-gather through host copies: 2 bytes per value each way.
  FormatRecorder inner;
  HostStagedCommunicator comm(inner, Device::Cpu);
  const std::vector<uint16_t> mine{0x3f80, 0x4000, 0xc040};
  std::vector<uint16_t> all(6, 0xffff);
  comm.allgather(ConstTensorRef(mine.data(), Precision::Bf16), TensorRef(all.data(), Precision::Bf16), 3,
                 Traffic::PipelineForward);
  EXPECT_EQ(inner.seen, Precision::Bf16);
  EXPECT_EQ(all, (std::vector<uint16_t>{0x3f80, 0x4000, 0xc040, 0, 0, 0}));
  std::vector<uint16_t> sum{0x3f80, 0x4000};
  comm.allreduce_sum(TensorRef(sum.data(), Precision::Fp16), 2, Traffic::TensorParallel);
  EXPECT_EQ(inner.seen, Precision::Fp16);
  EXPECT_EQ(sum, (std::vector<uint16_t>{0x3f80, 0x4000}));
}

TEST(PlanWire, TpSumsAndGradientsTakeTheirOwnBytesPerValue) {
  plan::PlanConfig c;
  c.model.num_layers = 4, c.model.hidden_size = 256, c.model.num_attention_heads = 4;
  c.model.seq_length = c.model.max_position_embeddings = 128, c.model.vocab_size = 1024;
  c.micro_batch_size = 2, c.global_batch_size = 8, c.tp = 2, c.pp = 2, c.dp = 2;
  c.cluster.nodes = 4, c.cluster.devices_per_node = 2;
  c.bytes_per_value = 4;
  const plan::CostModel f32 = plan::build_cost_model(c);
  c.bytes_per_value = 2, c.grad_bytes_per_value = 4;
  const plan::CostModel b16 = plan::build_cost_model(c);
  c.tp_sum_bytes_per_value = 4;
  const plan::CostModel sums32 = plan::build_cost_model(c);
  EXPECT_DOUBLE_EQ(b16.pp_message_bytes, f32.pp_message_bytes / 2);
  EXPECT_DOUBLE_EQ(b16.embedding_bytes, f32.embedding_bytes) << "gradients stay fp32";
  const double N = 2.0 * 128, ce = 3 * N * 4;  // the cross-entropy's fp32 statistics (ring of 2: N values each)
  for (size_t s = 0; s < 2; ++s) {
    const double a32 = f32.facts[s].tp_bytes_forward + f32.facts[s].tp_bytes_backward;
    const double a16 = b16.facts[s].tp_bytes_forward + b16.facts[s].tp_bytes_backward;
    const double stats = s == 1 ? ce : 0.0;
    EXPECT_DOUBLE_EQ(2 * a16 - a32, stats) << "stage " << s;
    EXPECT_DOUBLE_EQ(sums32.facts[s].tp_bytes_forward + sums32.facts[s].tp_bytes_backward, a32)
        << "without a pipeline gather in the counts, the TP bytes are sums: fp32 again";
  }
}

}  // namespace
}  // namespace occ
