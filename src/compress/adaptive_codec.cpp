#include "compress/adaptive_codec.h"

#include "core/error.h"
#include "core/rng.h"

namespace occ {

AdaptiveCompressor::AdaptiveCompressor(int64_t rows, int64_t cols, double high_fraction, bool stochastic,
                                       uint64_t seed, uint64_t key, kernels::Ops& ops)
    : StatelessCompressor(rows, cols),
      fraction_(high_fraction),
      stochastic_(stochastic),
      base_key_(make_key(seed, key, 0x4144415054ull /* "ADAPT" */)),
      key_(base_key_),
      ops_(ops) {
  wire::check_shape("adaptive", rows, cols);
  OCC_CHECK(high_fraction >= 0.0 && high_fraction <= 1.0,
            "the adaptive codec's high fraction must be in [0, 1] (got {}); pass e.g. 0.125", high_fraction);
}

void AdaptiveCompressor::set_message_key(uint64_t message) { key_ = make_key(base_key_, message); }

void AdaptiveCompressor::encode(const float* m, float* wire) {
  ops_.encode_adaptive(m, wire, rows_, cols_, kernels::AdaptiveCoding{fraction_, stochastic_, key_});
}

void AdaptiveCompressor::decode(const float* wire, float* out) const {
  ops_.decode_adaptive(wire, out, rows_, cols_, fraction_);
}

}  // namespace occ
