#pragma once
// This machine's memory, for refusing at start-up what could never fit (a count
// met later as std::bad_alloc, or as hours of paging, names no flag).
#include <unistd.h>

namespace occ {

// Physical memory in bytes (0 where the system does not say).
inline double host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? double(pages) * double(page) : 0.0;
}

}  // namespace occ
