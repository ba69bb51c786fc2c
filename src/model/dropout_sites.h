#pragma once
// The dropout sites of the model, part of every mask's key (core/rng.h
// make_key): changing a value changes every mask drawn there.
#include <cstdint>

namespace occ {

enum DropoutSite : uint64_t {
  kEmbeddingDropout = 0,
  kAttentionDropout = 1,
  kAttentionOutDropout = 2,
  kMlpOutDropout = 3,
};

}  // namespace occ
