// The GPU's side of host staging (core/device.h, core/host_staging.h): a copy
// queued on a CopyQueue after a DeviceMark sees every kernel queued before the
// mark, while kernels queued after it (on another buffer) may still run; the
// reducer thread's bucket copies rely on that. Without a visible GPU every
// test is SKIPPED.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "core/buffer.h"
#include "core/device.h"
#include "core/host_staging.h"
#include "cuda_twin.h"
#include "kernels/cuda/cuda_backend.h"

namespace occ::kernels {
namespace {

TEST_F(CudaOpsTest, CopyQueueWaitsForTheKernelsBeforeItsMark) {
  // Large enough that a copy that did not wait would read the old values.
  const int64_t n = int64_t(64) << 20;
  DeviceBuffer<float> bucket(Device::Cuda, size_t(n)), later(Device::Cuda, size_t(n));
  HostMirror mirror(Device::Cuda, bucket.data(), size_t(n), true);
  CopyQueue queue(Device::Cuda);
  DeviceMark ready(Device::Cuda);
  ASSERT_NE(ready.handle(), nullptr);
  for (float v : {1.5f, -2.0f}) {
    gpu().fill(bucket.data(), v, n);  // queued, not waited for
    ready.record();
    for (int k = 0; k < 8; ++k) gpu().fill(later.data(), float(k), n);  // the rest of the "backward"
    mirror.download(0, size_t(n), queue, ready);
    size_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) wrong += mirror.host()[i] != v;
    EXPECT_EQ(wrong, 0u) << "the queued download ran before the kernels before its mark";
    for (int64_t i = 0; i < n; i += 4096) mirror.host()[i] = v * 3.0f;
    mirror.upload(0, size_t(n), queue);  // done when it returns: the legacy stream's copy below sees it
    const std::vector<float> back = bucket.to_host();
    EXPECT_EQ(back[0], v * 3.0f);
    EXPECT_EQ(back[1], v);
    EXPECT_EQ(back[size_t(n) - 4096], v * 3.0f);
  }
  gpu().synchronize();
}

// The pipeline's iteration holds back GPU frees (cudaFree waits for the whole
// device, queued NCCL sends included): core/device.h, DeferredDeviceFrees.
TEST_F(CudaOpsTest, GpuFreesWaitForTheOutermostDeferralScope) {
  ASSERT_EQ(device_frees_deferred(), 0u);
  auto& pool = static_cast<cuda::CudaOps&>(gpu());
  pool.scratch(size_t(1) << 30);  // no test's kernels need more: the growth below frees this block
  {
    DeferredDeviceFrees outer;
    { DeviceBuffer<float> held(Device::Cuda, 1000); }
    {
      DeferredDeviceFrees inner;
      { DeviceBuffer<float> also_held(Device::Cuda, 10); }
      { DeviceBuffer<float> cpu(Device::Cpu, 10); }  // CPU frees are never held back
      // The scratch pool's growth frees its old block through the same path.
      pool.scratch(size_t(3) << 30);
    }
    EXPECT_EQ(device_frees_deferred(), 3u) << "an inner scope's end freed what the outer one holds";
    // Allocating and computing go on while frees are held back.
    DeviceBuffer<float> fresh(Device::Cuda, 1000);
    gpu().fill(fresh.data(), 2.0f, 1000);
    EXPECT_EQ(fresh.to_host()[999], 2.0f);
  }
  EXPECT_EQ(device_frees_deferred(), 0u);
  { DeviceBuffer<float> now(Device::Cuda, 10); }
  EXPECT_EQ(device_frees_deferred(), 0u);
  // A scope left by an exception frees nothing (its sends may still be
  // queued): the frees wait for the next scope's end.
  try {
    DeferredDeviceFrees failing;
    { DeviceBuffer<float> held(Device::Cuda, 10); }
    throw std::runtime_error("out of memory, say");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(device_frees_deferred(), 1u);
  { DeferredDeviceFrees next; }
  EXPECT_EQ(device_frees_deferred(), 0u);
  // A held-back block still counts as live (peak_gpu_mib) until it is freed.
  size_t live_while_held = 0;
  {
    DeferredDeviceFrees scope;
    { DeviceBuffer<float> held(Device::Cuda, size_t(1) << 20); }
    device_reset_peak(Device::Cuda);  // the peak becomes what is live now
    live_while_held = device_peak_bytes(Device::Cuda);
  }
  device_reset_peak(Device::Cuda);
  EXPECT_EQ(device_peak_bytes(Device::Cuda) + (size_t(4) << 20), live_while_held);
}

}  // namespace
}  // namespace occ::kernels
