#pragma once
// HostAllocator: the host memory behind every CPU DeviceBuffer (parameters,
// gradients, Adam's moments, activations) and the unpinned staging buffers.
//
// Why: a GPT-2-small run faulted in its 2.4 GB one 4 KiB page at a time (769k
// minor faults, each expensive on a virtual machine) and then zeroed every page
// a second time with memset. A block of kMappedMin bytes or more is therefore an
// anonymous mapping of its own, starting on a 2 MiB boundary and advised
// MADV_HUGEPAGE (transparent huge pages are often in `madvise` mode, where only
// a mapping that asks gets them): a fault then brings in 2 MiB at once, and the
// kernel's zero pages are the only zeroing. Where huge pages are unavailable
// (THP `never`, a kernel without them, OCC_HUGE_PAGES=off) the same mapping
// runs on 4 KiB pages: no message, same contents. Smaller blocks come from the
// C heap, zeroed there.
//
// Every block is zero-filled and 64-byte aligned.
#include <cstddef>

namespace occ {

class HostAllocator {
 public:
  static constexpr size_t kHugePage = size_t(2) << 20;
  // Blocks from this size on are mappings of their own (smaller ones share heap pages).
  static constexpr size_t kMappedMin = size_t(1) << 20;

  // `bytes` zero-filled bytes (a valid unique pointer for 0 bytes too); throws
  // std::bad_alloc when the system has no memory for them.
  static void* allocate(size_t bytes);
  // A block from allocate(), or null.
  static void release(void* p) noexcept;
  // The bytes a block was allocated with.
  static size_t size_of(const void* p) noexcept;
  // Whether the block is a mapping advised MADV_HUGEPAGE (the kernel accepted
  // the advice; whether it found free huge pages is its business).
  static bool advised_huge(const void* p) noexcept;

  // Huge pages are asked for unless the environment variable OCC_HUGE_PAGES is
  // "off" or "0" ("on", "1" or unset: asked). Read once, at the first block; any
  // other value throws occ::Error naming the choices.
  static bool huge_pages_wanted();
  // The rule huge_pages_wanted() applies to the variable's value (null: unset).
  static bool parse_huge_pages_setting(const char* value);

  // A mapped block whatever its size, huge pages asked for or not (what
  // allocate() does for big blocks; the tests run both paths in one process).
  static void* allocate_mapped(size_t bytes, bool huge);
  // Whether `p` (non-null) is a block of this allocator (the pinned staging
  // buffers of core/device.h come from CUDA or from here).
  static bool owns(const void* p) noexcept;
};

}  // namespace occ
