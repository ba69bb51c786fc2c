// core/host_allocator.h: big blocks are 2 MiB-aligned mappings advised
// MADV_HUGEPAGE, and without huge pages (OCC_HUGE_PAGES=off, or a kernel
// without them) the same blocks on 4 KiB pages; every block zero-filled,
// reused heap memory included.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "core/buffer.h"
#include "core/device.h"
#include "core/error.h"
#include "core/host_allocator.h"

namespace occ {
namespace {

// The VmFlags of the mapping holding `p` (/proc/self/smaps), "" if not found.
std::string vm_flags_of(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= a && a < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

bool kernel_has_transparent_huge_pages() {
  struct stat st {};
  return stat("/sys/kernel/mm/transparent_hugepage/enabled", &st) == 0;
}

bool all_zero(const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i]) return false;
  return true;
}

constexpr size_t kBig = (size_t(5) << 20) + 12345;  // 5 MiB and a partial page

TEST(HostAllocator, BigBlocksAreHugePageAlignedMappingsAdvisedHuge) {
  auto* p = static_cast<unsigned char*>(HostAllocator::allocate_mapped(kBig, true));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % HostAllocator::kHugePage, 0u);
  EXPECT_EQ(HostAllocator::size_of(p), kBig);
  EXPECT_TRUE(HostAllocator::owns(p));
  EXPECT_TRUE(all_zero(p, kBig));
  std::memset(p, 0x5a, kBig);  // every byte is writable
  // Where the kernel has transparent huge pages it accepts the advice, and the
  // block's mapping carries it ("hg"); elsewhere the block runs on small pages.
  EXPECT_EQ(HostAllocator::advised_huge(p), kernel_has_transparent_huge_pages());
  const std::string flags = vm_flags_of(p);
  ASSERT_NE(flags, "");
  EXPECT_EQ(flags.find(" hg") != std::string::npos, HostAllocator::advised_huge(p)) << flags;
  HostAllocator::release(p);
}

// The fallback: the same block without huge pages (what OCC_HUGE_PAGES=off does
// and what a kernel without them gives): zero-filled, writable, never advised.
TEST(HostAllocator, WithoutHugePagesTheSameBlockOnSmallPages) {
  auto* p = static_cast<unsigned char*>(HostAllocator::allocate_mapped(kBig, false));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 4096, 0u);
  EXPECT_EQ(HostAllocator::size_of(p), kBig);
  EXPECT_FALSE(HostAllocator::advised_huge(p));
  EXPECT_TRUE(all_zero(p, kBig));
  std::memset(p, 0x5a, kBig);
  const std::string flags = vm_flags_of(p);
  ASSERT_NE(flags, "");
  EXPECT_EQ(flags.find(" hg"), std::string::npos) << flags;
  HostAllocator::release(p);
}

TEST(HostAllocator, SmallBlocksComeFromTheHeapZeroedEvenWhenReused) {
  for (int round = 0; round < 3; ++round) {
    auto* p = static_cast<unsigned char*>(HostAllocator::allocate(1000));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
    EXPECT_FALSE(HostAllocator::advised_huge(p));
    EXPECT_TRUE(all_zero(p, 1000)) << "round " << round;
    std::memset(p, 0xff, 1000);  // dirty it for the next round's block
    HostAllocator::release(p);
  }
  void* empty = HostAllocator::allocate(0);
  EXPECT_NE(empty, nullptr);
  EXPECT_EQ(HostAllocator::size_of(empty), 0u);
  HostAllocator::release(empty);
  HostAllocator::release(nullptr);
}

TEST(HostAllocator, TheEnvironmentVariableSaysOnOrOff) {
  EXPECT_TRUE(HostAllocator::parse_huge_pages_setting(nullptr));
  EXPECT_TRUE(HostAllocator::parse_huge_pages_setting(""));
  EXPECT_TRUE(HostAllocator::parse_huge_pages_setting("on"));
  EXPECT_TRUE(HostAllocator::parse_huge_pages_setting("1"));
  EXPECT_FALSE(HostAllocator::parse_huge_pages_setting("off"));
  EXPECT_FALSE(HostAllocator::parse_huge_pages_setting("0"));
  try {
    HostAllocator::parse_huge_pages_setting("maybe");
    ADD_FAILURE() << "OCC_HUGE_PAGES=maybe accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("OCC_HUGE_PAGES=off"), std::string::npos) << e.what();
  }
}

// A CPU DeviceBuffer's big memory: zero when (re)allocated, zero() still zeroes
// what a step wrote (reused memory that must be zero).
TEST(HostAllocator, BigDeviceBuffersAreZeroWhereTheyMustBe) {
  DeviceBuffer<float> b(Device::Cpu, (size_t(3) << 20) / sizeof(float));
  EXPECT_TRUE(all_zero(reinterpret_cast<unsigned char*>(b.data()), b.size() * sizeof(float)));
  for (size_t i = 0; i < b.size(); ++i) b.data()[i] = 1.5f;
  b.zero();
  EXPECT_TRUE(all_zero(reinterpret_cast<unsigned char*>(b.data()), b.size() * sizeof(float)));
  for (size_t i = 0; i < b.size(); ++i) b.data()[i] = 2.5f;
  b.resize(b.size() + 1000);  // a new block: zero again
  EXPECT_TRUE(all_zero(reinterpret_cast<unsigned char*>(b.data()), b.size() * sizeof(float)));
  EXPECT_EQ(HostAllocator::advised_huge(b.data()),
            HostAllocator::huge_pages_wanted() && kernel_has_transparent_huge_pages());
  // The staging buffers' host memory (no GPU here): HostAllocator's, zeroed.
  void* staging = pinned_host_alloc(size_t(2) << 20);
  EXPECT_TRUE(HostAllocator::owns(staging) || cuda_device_count() > 0);
  EXPECT_TRUE(all_zero(static_cast<unsigned char*>(staging), size_t(2) << 20));
  pinned_host_free(staging);
}

}  // namespace
}  // namespace occ
