#include "core/normal_fill.h"

#include <algorithm>
#include <math.h>  // sincosf (GNU)

#include <cmath>

#include "core/rng.h"

namespace occ {

namespace {

// Philox blocks drawn per batch: enough for the compiler's vector loops, small
// enough that a batch's arrays stay in L1.
constexpr int64_t kBatch = 64;

// Philox::block(key, 0, first_block + j) for j in [0, count), one array per
// output word: Philox::block's rounds written over a batch (structure of arrays).
void philox_batch(uint64_t key, uint64_t first_block, int64_t count, uint32_t (&out)[4][kBatch]) {
  uint32_t c0[kBatch], c1[kBatch], c2[kBatch], c3[kBatch];
  for (int64_t j = 0; j < kBatch; ++j) {
    const uint64_t lo = first_block + uint64_t(j);
    c0[j] = uint32_t(lo);
    c1[j] = uint32_t(lo >> 32);
    c2[j] = 0;
    c3[j] = 0;
  }
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int round = 0; round < 10; ++round) {
    for (int64_t j = 0; j < kBatch; ++j) {
      const uint64_t p0 = uint64_t(0xD2511F53u) * c0[j];
      const uint64_t p1 = uint64_t(0xCD9E8D57u) * c2[j];
      const uint32_t n0 = uint32_t(p1 >> 32) ^ c1[j] ^ k0;
      const uint32_t n2 = uint32_t(p0 >> 32) ^ c3[j] ^ k1;
      c1[j] = uint32_t(p1);
      c3[j] = uint32_t(p0);
      c0[j] = n0;
      c2[j] = n2;
    }
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  for (int64_t j = 0; j < count; ++j) {
    out[0][j] = c0[j];
    out[1][j] = c1[j];
    out[2][j] = c2[j];
    out[3][j] = c3[j];
  }
}

// `count` whole blocks from block `first_block` into dst (4 values each).
// normal_at's arithmetic exactly: r = sqrt(-2 log u1), theta = 2 pi u2; lane 0
// of a pair is r cos(theta), lane 1 r sin(theta); times scale.
void fill_blocks(float* dst, uint64_t key, uint64_t first_block, int64_t count, float scale) {
  uint32_t bits[4][kBatch];
  float r[2][kBatch], theta[2][kBatch], cosine[2][kBatch], sine[2][kBatch];
  for (int64_t done = 0; done < count; done += kBatch) {
    const int64_t m = std::min(kBatch, count - done);
    philox_batch(key, first_block + uint64_t(done), m, bits);
    for (int pair = 0; pair < 2; ++pair) {
      for (int64_t j = 0; j < m; ++j) r[pair][j] = std::log(bits_to_unit(bits[2 * pair][j]));
      for (int64_t j = 0; j < m; ++j) r[pair][j] = std::sqrt(-2.0f * r[pair][j]);
      for (int64_t j = 0; j < m; ++j) theta[pair][j] = 6.2831853071795864f * bits_to_unit(bits[2 * pair + 1][j]);
      // glibc's sincosf evaluates the same polynomials as its sinf and cosf: the
      // same bits for all 2^24 angles 2 pi u can take (checked exhaustively on
      // glibc 2.36; the unit tests hold the result to normal_at's).
      for (int64_t j = 0; j < m; ++j) ::sincosf(theta[pair][j], &sine[pair][j], &cosine[pair][j]);
    }
    float* out = dst + 4 * done;
    for (int64_t j = 0; j < m; ++j) {
      out[4 * j + 0] = scale * (r[0][j] * cosine[0][j]);
      out[4 * j + 1] = scale * (r[0][j] * sine[0][j]);
      out[4 * j + 2] = scale * (r[1][j] * cosine[1][j]);
      out[4 * j + 3] = scale * (r[1][j] * sine[1][j]);
    }
  }
}

}  // namespace

void normal_fill(float* dst, int64_t n, uint64_t key, uint64_t first, float scale) {
  // A partial block at either end goes element by element.
  int64_t j = 0;
  for (; j < n && ((first + uint64_t(j)) & 3) != 0; ++j) dst[j] = scale * normal_at(key, 0, first + uint64_t(j));
  const int64_t blocks = (n - j) / 4;
  if (blocks > 0) fill_blocks(dst + j, key, (first + uint64_t(j)) >> 2, blocks, scale);
  for (j += 4 * blocks; j < n; ++j) dst[j] = scale * normal_at(key, 0, first + uint64_t(j));
}

}  // namespace occ
