#pragma once
// A run of a standard-normal stream, scaled: the parameters' initial values.
#include <cstdint>

namespace occ {

// dst[j] = scale * normal_at(key, 0, first + j) for j in [0, n), bit for bit
// (core/rng.h; normal_at is the simple twin, tests/unit/test_param_init.cpp).
// Faster than calling normal_at per element: one Philox block serves its four
// elements (normal_at draws the block once per element), the blocks are drawn
// in batches the compiler vectorises, and each block's two Box-Muller pairs
// take one logf, one sqrtf and one sincosf each. The transcendental functions
// stay libm's scalar ones: a vector libm (libmvec) rounds differently, and the
// weights must not change. Runs on the calling thread.
void normal_fill(float* dst, int64_t n, uint64_t key, uint64_t first, float scale);

}  // namespace occ
