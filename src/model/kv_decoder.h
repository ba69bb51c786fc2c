#pragma once
// Incremental decoding with a key/value cache, for `generate`: the prompt runs
// once through the stage's own forward (prefill), whose layer activations hold
// every position's rotated k and v; each new token then runs one position's
// forward through the same kernels, its attention reading the cached k and v
// (kernels::attention_decode), instead of recomputing the whole window. The
// uncached path (GptStage::forward over the window) is its reference: the
// logits agree up to float summation order (tests/cli/generate_kv.sh, cli.generate_kv).
#include <cstdint>
#include <vector>

#include "model/gpt.h"

namespace occ {

class KvCacheDecoder {
 public:
  // stage: a single-process fp32 stage on the CPU holding the weights.
  explicit KvCacheDecoder(GptStage& stage);

  // Forgets the cache and runs `ids` (1..seq_length tokens) through the full
  // forward; returns every position's next-token logits [ids.size(), padded vocab].
  std::vector<float> prefill(const std::vector<int32_t>& ids);
  // Appends `token` at the next position (length() < seq_length) and returns
  // its next-token logits [padded vocab].
  std::vector<float> step(int32_t token);
  int64_t length() const { return length_; }
  int64_t capacity() const { return stage_.config().seq_length; }

 private:
  GptStage& stage_;
  BlockOps block_;
  StageActivations acts_;
  std::vector<std::vector<float>> cache_;  // per layer [seq_length, qkv width]: q, k (rotated) and v of each position
  std::vector<float> rope_table_;
  int64_t length_ = 0;
  // One position's scratch.
  std::vector<float> x_, ln_, mean_, rstd_, atty_, branch_, resid_, fc_, act_, logits_;
};

}  // namespace occ
