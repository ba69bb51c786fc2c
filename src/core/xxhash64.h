#pragma once
// XXH64 (Yann Collet's xxHash, 64-bit): a fast non-cryptographic checksum
// (several GB/s on one core), for telling a damaged file from a good one
// (the data index cache: data/index_cache.h). Equal to the reference
// implementation's XXH64(data, size, seed).
#include <cstddef>
#include <cstdint>

namespace occ {

uint64_t xxhash64(const void* data, size_t size, uint64_t seed = 0);

}  // namespace occ
