// Core device layer: Philox (shared by the CPU and CUDA kernels) against the
// published known-answer vectors, DeviceBuffer semantics, and device selection.
#include <gtest/gtest.h>

#include <string>

#include "core/buffer.h"
#include "core/device.h"
#include "core/error.h"
#include "core/rng.h"
#include "kernels/ops.h"

namespace occ {
namespace {

// Philox4x32-10 known answers (Salmon et al., SC'11; the Random123 KAT file):
// counter words c0..c3 = (lo, lo >> 32, hi, hi >> 32), key words (key, key >> 32).
TEST(Philox, KnownAnswers) {
  PhiloxBlock zero = Philox::block(0, 0, 0);
  EXPECT_EQ(zero[0], 0x6627e8d5u);
  EXPECT_EQ(zero[1], 0xe169c58du);
  EXPECT_EQ(zero[2], 0xbc57ac4cu);
  EXPECT_EQ(zero[3], 0x9b00dbd8u);
  PhiloxBlock ones = Philox::block(~0ull, ~0ull, ~0ull);
  EXPECT_EQ(ones[0], 0x408f276du);
  EXPECT_EQ(ones[1], 0x41c83b0eu);
  EXPECT_EQ(ones[2], 0xa20bc7c6u);
  EXPECT_EQ(ones[3], 0x6d5451fdu);
  // ctr = (243f6a88, 85a308d3, 13198a2e, 03707344), key = (a4093822, 299f31d0)
  PhiloxBlock pi = Philox::block(0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a88ull);
  EXPECT_EQ(pi[0], 0xd16cfe09u);
  EXPECT_EQ(pi[1], 0x94fdccebu);
  EXPECT_EQ(pi[2], 0x5001e420u);
  EXPECT_EQ(pi[3], 0x24126ea1u);
}

TEST(Philox, UnitIntervalIsOpenAtZero) {
  EXPECT_GT(bits_to_unit(0u), 0.0f);
  EXPECT_EQ(bits_to_unit(0xffffffffu), 1.0f);
}

TEST(DeviceBuffer, ZeroFilledResizeKeepsOrReallocates) {
  DeviceBuffer<float> b(Device::Cpu, 5);
  ASSERT_EQ(b.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(b.data()[i], 0.0f);
  b.data()[2] = 7.0f;
  b.resize(5);  // same size: contents kept
  EXPECT_EQ(b.data()[2], 7.0f);
  b.resize(9);  // new size: fresh zeros
  for (size_t i = 0; i < 9; ++i) EXPECT_EQ(b.data()[i], 0.0f);
  b.clear();
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(b.data(), nullptr);
}

TEST(DeviceBuffer, HostCopiesAndMoves) {
  DeviceBuffer<float> b(Device::Cpu);
  b.assign_from_host({1.0f, 2.0f, 3.0f});
  float two[2] = {8.0f, 9.0f};
  b.copy_from_host(two, 2, 1);
  EXPECT_EQ(b.to_host(), (std::vector<float>{1.0f, 8.0f, 9.0f}));
  DeviceBuffer<float> moved(std::move(b));
  EXPECT_EQ(moved.size(), 3u);
  EXPECT_EQ(b.size(), 0u);  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  float out[1];
  moved.copy_to_host(out, 1, 2);
  EXPECT_EQ(out[0], 9.0f);
}

TEST(DeviceBuffer, PeakCountsLiveBytes) {
  device_reset_peak(Device::Cpu);
  const size_t before = device_peak_bytes(Device::Cpu);
  {
    DeviceBuffer<float> a(Device::Cpu, 1000), b(Device::Cpu, 500);
    EXPECT_EQ(device_peak_bytes(Device::Cpu), before + 6000);
  }
  DeviceBuffer<float> c(Device::Cpu, 100);  // after a and b were freed: the peak stays
  EXPECT_EQ(device_peak_bytes(Device::Cpu), before + 6000);
  device_reset_peak(Device::Cpu);
  EXPECT_EQ(device_peak_bytes(Device::Cpu), before + 400);
}

TEST(Device, ParseAndErrors) {
  EXPECT_EQ(parse_device("cpu"), Device::Cpu);
  EXPECT_EQ(parse_device("cuda"), Device::Cuda);
  try {
    parse_device("gpu");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("use --device cpu or --device cuda"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(require_device(Device::Cpu));
  EXPECT_EQ(&kernels::ops_for(Device::Cpu), &kernels::cpu_ops());
  if (cuda_device_count() == 0) {
    // No GPU here: asking for one is a clear error, and the default is the CPU.
    EXPECT_EQ(default_device(), Device::Cpu);
    EXPECT_THROW(require_device(Device::Cuda), Error);
    EXPECT_THROW(kernels::ops_for(Device::Cuda), Error);
  } else {
    EXPECT_EQ(default_device(), Device::Cuda);
  }
}

}  // namespace
}  // namespace occ
