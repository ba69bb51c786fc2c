#include "core/host_allocator.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "core/error.h"

namespace occ {

namespace {

// Just before every block's first byte (so 64-byte alignment is kept).
struct alignas(64) BlockHeader {
  uint64_t magic;
  size_t bytes;       // as asked
  void* base;         // what to free: the heap block, or the mapping's start
  size_t mapped;      // the mapping's length; 0 for a heap block
  bool advised_huge;  // madvise(MADV_HUGEPAGE) accepted
};
static_assert(sizeof(BlockHeader) == 64);
constexpr uint64_t kMagic = 0x6f63632d686f7374ull;  // "occ-host"

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

BlockHeader* header_of(const void* p) {
  return reinterpret_cast<BlockHeader*>(const_cast<char*>(static_cast<const char*>(p)) - sizeof(BlockHeader));
}

void* heap_block(size_t bytes) {
  void* base = std::aligned_alloc(64, sizeof(BlockHeader) + round_up(bytes, 64));
  if (!base) throw std::bad_alloc();
  char* payload = static_cast<char*>(base) + sizeof(BlockHeader);
  std::memset(payload, 0, bytes);  // heap memory may be reused: zero it
  *header_of(payload) = BlockHeader{kMagic, bytes, base, 0, false};
  return payload;
}

// A mapping of its own: one 4 KiB page for the header, then the block, which
// starts on a 2 MiB boundary when huge pages are asked for (the kernel backs
// only whole aligned 2 MiB ranges with a huge page). Anonymous pages come zeroed.
void* mapped_block(size_t bytes, bool huge) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  const size_t length = round_up(bytes, page);
  const size_t reserve = page + length + (huge ? HostAllocator::kHugePage : 0);
  void* raw = mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  char* const start = static_cast<char*>(raw);
  char* payload = start + page;
  if (huge) {
    payload = reinterpret_cast<char*>(round_up(reinterpret_cast<uintptr_t>(payload), HostAllocator::kHugePage));
    // Give back the slack on either side of [header page, block).
    char* const keep = payload - page;
    if (keep > start) munmap(start, size_t(keep - start));
    char* const end = payload + length;
    if (start + reserve > end) munmap(end, size_t(start + reserve - end));
  }
  // No huge pages to be had (THP disabled, or a kernel without them) is not an
  // error: the block runs on 4 KiB pages.
  const bool advised = huge && madvise(payload, length, MADV_HUGEPAGE) == 0;
  *header_of(payload) = BlockHeader{kMagic, bytes, payload - page, page + length, advised};
  return payload;
}

}  // namespace

bool HostAllocator::parse_huge_pages_setting(const char* value) {
  if (!value) return true;
  const std::string v = value;
  if (v.empty() || v == "on" || v == "1") return true;
  if (v == "off" || v == "0") return false;
  fail("OCC_HUGE_PAGES={} is not a setting; use OCC_HUGE_PAGES=on (the default) or OCC_HUGE_PAGES=off", v);
}

bool HostAllocator::huge_pages_wanted() {
  static const bool wanted = parse_huge_pages_setting(std::getenv("OCC_HUGE_PAGES"));
  return wanted;
}

void* HostAllocator::allocate(size_t bytes) {
  if (bytes < kMappedMin) return heap_block(bytes);
  return mapped_block(bytes, huge_pages_wanted());
}

void* HostAllocator::allocate_mapped(size_t bytes, bool huge) { return mapped_block(bytes, huge); }

void HostAllocator::release(void* p) noexcept {
  if (!p) return;
  const BlockHeader h = *header_of(p);
  if (h.mapped)
    munmap(h.base, h.mapped);
  else
    std::free(h.base);
}

size_t HostAllocator::size_of(const void* p) noexcept { return p ? header_of(p)->bytes : 0; }

bool HostAllocator::advised_huge(const void* p) noexcept { return p && header_of(p)->advised_huge; }

bool HostAllocator::owns(const void* p) noexcept { return p && header_of(p)->magic == kMagic; }

}  // namespace occ
