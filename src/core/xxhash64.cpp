#include "core/xxhash64.h"

#include <bit>
#include <cstring>

static_assert(std::endian::native == std::endian::little, "XXH64 reads its input little-endian");

namespace occ {
namespace {

constexpr uint64_t kP1 = 11400714785074694791ull, kP2 = 14029467366897019727ull, kP3 = 1609587929392839161ull,
                   kP4 = 9650029242287828579ull, kP5 = 2870177450012600261ull;

inline uint64_t read64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint32_t read32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t round(uint64_t acc, uint64_t input) { return std::rotl(acc + input * kP2, 31) * kP1; }
inline uint64_t merge(uint64_t acc, uint64_t v) { return (acc ^ round(0, v)) * kP1 + kP4; }

}  // namespace

uint64_t xxhash64(const void* data, size_t size, uint64_t seed) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  const unsigned char* const end = p + size;
  uint64_t h;
  if (size >= 32) {
    uint64_t v1 = seed + kP1 + kP2, v2 = seed + kP2, v3 = seed, v4 = seed - kP1;
    for (const unsigned char* limit = end - 32; p <= limit; p += 32) {
      v1 = round(v1, read64(p)), v2 = round(v2, read64(p + 8));
      v3 = round(v3, read64(p + 16)), v4 = round(v4, read64(p + 24));
    }
    h = std::rotl(v1, 1) + std::rotl(v2, 7) + std::rotl(v3, 12) + std::rotl(v4, 18);
    h = merge(merge(merge(merge(h, v1), v2), v3), v4);
  } else {
    h = seed + kP5;
  }
  h += uint64_t(size);
  for (; p + 8 <= end; p += 8) h = std::rotl(h ^ round(0, read64(p)), 27) * kP1 + kP4;
  if (p + 4 <= end) h = std::rotl(h ^ (uint64_t(read32(p)) * kP1), 23) * kP2 + kP3, p += 4;
  for (; p < end; ++p) h = std::rotl(h ^ (uint64_t(*p) * kP5), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

}  // namespace occ
