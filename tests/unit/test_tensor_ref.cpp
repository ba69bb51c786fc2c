// 16-bit storage (core/tensor_ref.h, core/tensor_buffer.h, core/precision.h's bit
// conversions): every 16-bit pattern widens and narrows back to itself, narrowing
// equals the rounding functions that define --bf16 / --fp16, references step by the
// format's element size, and the CPU backend refuses a 16-bit tensor (it stores fp32).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/precision.h"
#include "core/rng.h"
#include "core/tensor_buffer.h"
#include "kernels/ops.h"

namespace occ {
namespace {

TEST(SixteenBits, EveryPatternRoundTrips) {
  for (Precision p : {Precision::Bf16, Precision::Fp16}) {
    for (uint32_t b = 0; b < 65536; ++b) {
      const float v = sixteen_value(p, uint16_t(b));
      if (std::isnan(v)) continue;  // NaN payloads need not survive
      ASSERT_EQ(sixteen_bits(p, v), b) << precision_name(p) << " pattern " << b << " value " << v;
      ASSERT_EQ(round_to(p, v), v) << "a 16-bit value is already rounded";
    }
  }
}

TEST(SixteenBits, NarrowingIsTheDefiningRounding) {
  // Random fp32 bit patterns (all exponents) and values near the formats' edges.
  std::vector<float> xs = {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 1e-8f, 5.96e-8f, 2.98e-8f, 3e38f, -3.4e38f,
                           INFINITY, -INFINITY, 0x1p-14f, 0x1p-15f, 0x1.fffp-15f};
  for (uint64_t i = 0; i < 200000; ++i) {
    const uint32_t u = Philox::block(0x16B17, 0, i)[0];
    float x;
    std::memcpy(&x, &u, 4);
    if (!std::isnan(x)) xs.push_back(x);
  }
  for (Precision p : {Precision::Bf16, Precision::Fp16})
    for (float x : xs) {
      const float via_bits = sixteen_value(p, sixteen_bits(p, x));
      const float r = round_to(p, x);
      ASSERT_TRUE(via_bits == r || (std::isnan(via_bits) && std::isnan(r))) << precision_name(p) << " x " << x;
      ASSERT_EQ(std::signbit(via_bits), std::signbit(r)) << precision_name(p) << " x " << x;
    }
  EXPECT_TRUE(std::isnan(sixteen_value(Precision::Bf16, sixteen_bits(Precision::Bf16, NAN))));
  EXPECT_TRUE(std::isnan(sixteen_value(Precision::Fp16, sixteen_bits(Precision::Fp16, NAN))));
}

TEST(TensorRef, StepsByTheFormatsElementSize) {
  alignas(16) unsigned char bytes[64] = {};
  const TensorRef f(bytes, Precision::Fp32), h(bytes, Precision::Bf16);
  EXPECT_EQ(static_cast<unsigned char*>((f + 3).data()) - bytes, 12);
  EXPECT_EQ(static_cast<unsigned char*>((h + 3).data()) - bytes, 6);
  EXPECT_EQ((h + 3).format(), Precision::Bf16);
  EXPECT_FALSE(bool(TensorRef() + 5));  // null stays null
  float x[4] = {};
  const ConstTensorRef c = x;  // a plain fp32 array converts implicitly
  EXPECT_TRUE(c.is_fp32());
  EXPECT_EQ(c.f32(), x);
  EXPECT_THROW((void)ConstTensorRef(h).f32(), Error);
}

TEST(TensorBuffer, HostCopiesConvertAndSizesFollowTheFormat) {
  TensorBuffer b(Device::Cpu, Precision::Bf16, 5);
  EXPECT_EQ(b.bytes(), 10u);
  const std::vector<float> values = {1.0f, 1.00390625f, 1.005859375f, -3.0f, 1e-3f};
  b.assign_from_host_f32(values);
  const std::vector<float> back = b.to_host_f32();
  ASSERT_EQ(back.size(), values.size());
  for (size_t i = 0; i < back.size(); ++i) EXPECT_EQ(back[i], round_bf16(values[i])) << i;
  b.set_format(Precision::Fp32);
  EXPECT_EQ(b.bytes(), 20u);
  EXPECT_EQ(b.to_host_f32(), std::vector<float>(5, 0.0f));  // another format drops the values
}

TEST(TensorRef, TheCpuBackendStoresFp32Only) {
  kernels::Ops& cpu = kernels::cpu_ops();
  EXPECT_EQ(cpu.storage_format(Precision::Bf16), Precision::Fp32);
  TensorBuffer h(Device::Cpu, Precision::Bf16, 8), f(Device::Cpu, Precision::Fp32, 8);
  // Its kernels compute on fp32 only; copy also packs and unpacks 16-bit wires
  // (core/wire_format.h: what travels between ranks in a --bf16 run).
  EXPECT_THROW(cpu.gelu_forward(h.ref(), h.ref(), 8), Error);
  f.assign_from_host_f32({1.5f, -2.0f, 3.14159f, 0, 0, 0, 0, 0});
  cpu.copy(h.ref(), f.ref(), 8);
  cpu.copy(f.ref(), h.ref(), 8);
  EXPECT_EQ(f.to_host_f32()[2], round_bf16(3.14159f));
  EXPECT_EQ(f.to_host_f32()[1], -2.0f);
}

}  // namespace
}  // namespace occ
