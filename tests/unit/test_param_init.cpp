// The parameters' initial values: ParamLayout::initialize (batched Philox
// blocks, OpenMP pieces) against its simple twin, the per-element normal_at
// loop it replaced, bit for bit, over several layouts; and every layout's
// shards against the unsplit model's tensors (the same weights however the job
// is split).
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/normal_fill.h"
#include "core/rng.h"
#include "model/params.h"

namespace occ {
namespace {

// The initializer as it was: one normal_at per element, single-threaded.
std::vector<float> simple_twin(const ParamLayout& layout, int tp_rank, uint64_t seed) {
  std::vector<float> params(size_t(layout.total()), -1.0f);
  for (const auto& t : layout.tensors()) {
    float* p = params.data() + t.offset;
    if (t.init == InitKind::Zeros) {
      for (int64_t i = 0; i < t.numel; ++i) p[i] = 0.0f;
    } else if (t.init == InitKind::Ones) {
      for (int64_t i = 0; i < t.numel; ++i) p[i] = 1.0f;
    } else {
      const uint64_t key = make_key(seed, t.init_key);
      for (int64_t i = 0; i < t.numel; ++i) p[i] = t.init_std * normal_at(key, 0, uint64_t(t.global_index(i, tp_rank)));
    }
  }
  return params;
}

std::vector<float> initialized(const ParamLayout& layout, uint64_t seed) {
  std::vector<float> params(size_t(layout.total()), -1.0f);
  layout.initialize(params.data(), seed);
  return params;
}

// Bitwise (memcmp) equality, naming the first differing element.
void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", the simple twin's " << want[i];
      return;
    }
}

// Small, with odd widths: hidden 36 split over 2 ranks puts a column shard's
// rows at global indices 2 mod 4, mid Philox block.
GptConfig small_config() {
  GptConfig c;
  c.num_layers = 4;
  c.hidden_size = 36;
  c.num_attention_heads = 6;
  c.seq_length = 16;
  c.max_position_embeddings = 16;
  c.vocab_size = 101;
  c.make_vocab_size_divisible_by = 24;  // 120 rows: whole shards at TP 2 and 3
  return c;
}

struct Variant {
  std::string name;
  GptConfig cfg;
};

std::vector<Variant> variants() {
  std::vector<Variant> out{{"gpt2", small_config()}};
  GptConfig llama = small_config();  // SwiGLU (rows split in halves), RMSNorm, rope, untied head, no biases
  llama.swiglu = true;
  llama.ffn_hidden = 96;
  llama.normalization = Normalization::RMSNorm;
  llama.position_embedding = PositionEmbedding::Rope;
  llama.untie_embeddings_and_output_weights = true;
  llama.add_bias_linear = false;
  out.push_back({"llama", llama});
  return out;
}

struct Split {
  int tp, pp, vp;
};

TEST(ParamInit, EqualsTheSimpleTwinBitForBitOnEveryLayout) {
  const int threads = omp_get_max_threads();
  omp_set_num_threads(3);  // pieces taken by several threads, in whatever order
  for (const Variant& v : variants())
    for (const Split s : {Split{1, 1, 1}, Split{2, 1, 1}, Split{3, 1, 1}, Split{2, 2, 1}, Split{1, 2, 2}, Split{1, 4, 1}})
      for (int pp_rank = 0; pp_rank < s.pp; ++pp_rank)
        for (int tp_rank = 0; tp_rank < s.tp; ++tp_rank)
          for (uint64_t seed : {1234ull, 7ull}) {
            ParallelLayout l;
            l.tp_size = s.tp, l.pp_size = s.pp, l.vp_size = s.vp, l.tp_rank = tp_rank, l.pp_rank = pp_rank;
            v.cfg.validate(l);
            const ParamLayout layout(v.cfg, l);
            expect_same_bits(initialized(layout, seed), simple_twin(layout, tp_rank, seed),
                             v.name + " TP" + std::to_string(s.tp) + " PP" + std::to_string(s.pp) + " VP" +
                                 std::to_string(s.vp) + " rank tp" + std::to_string(tp_rank) + " pp" +
                                 std::to_string(pp_rank) + " seed " + std::to_string(seed));
          }
  omp_set_num_threads(threads);
}

// Each shard's values are the unsplit model's at the shard's global indices:
// checked by rebuilding every full tensor from the TP2 x PP2 shards.
TEST(ParamInit, ShardsOfEveryLayoutAreTheUnsplitModelsValues) {
  for (const Variant& v : variants()) {
    const ParamLayout whole(v.cfg, ParallelLayout{});
    const std::vector<float> full = initialized(whole, 1234);
    std::map<std::string, std::vector<float>> rebuilt;
    for (int pp_rank = 0; pp_rank < 2; ++pp_rank)
      for (int tp_rank = 0; tp_rank < 2; ++tp_rank) {
        ParallelLayout l;
        l.tp_size = 2, l.pp_size = 2, l.tp_rank = tp_rank, l.pp_rank = pp_rank;
        const ParamLayout layout(v.cfg, l);
        const std::vector<float> shard = initialized(layout, 1234);
        for (const auto& t : layout.tensors()) {
          if (t.name == "lm_head.word_embeddings.weight") continue;  // the copy: checked below
          auto& out = rebuilt[t.name];
          out.resize(size_t(whole.find(t.name).numel), -7.0f);
          for (int64_t i = 0; i < t.numel; ++i) out[size_t(t.global_index(i, tp_rank))] = shard[size_t(t.offset + i)];
        }
        if (!v.cfg.untie_embeddings_and_output_weights && pp_rank == 1) {
          // The last stage's copy of the tied embedding starts equal to the first stage's.
          const ParamTensor& copy = layout.find("lm_head.word_embeddings.weight");
          const ParamTensor& original = whole.find("embedding.word_embeddings.weight");
          for (int64_t i = 0; i < copy.numel; ++i)
            ASSERT_EQ(shard[size_t(copy.offset + i)], full[size_t(original.offset + copy.global_index(i, tp_rank))]);
        }
      }
    for (const auto& t : whole.tensors()) {
      const std::vector<float> want(full.begin() + t.offset, full.begin() + t.offset + t.numel);
      expect_same_bits(rebuilt.at(t.name), want, v.name + " " + t.name);
    }
  }
}

// normal_fill from every start within a Philox block, for lengths that end
// anywhere in one (the partial blocks run element by element), and across
// several of its batches of blocks.
TEST(ParamInit, NormalFillEqualsNormalAtFromAnyStart) {
  const uint64_t key = make_key(99, 5);
  for (uint64_t first : {0ull, 1ull, 2ull, 3ull, 4ull, 5ull, 1000003ull, (1ull << 32) - 2})
    for (int64_t n : {0, 1, 2, 3, 4, 5, 7, 8, 9, 255, 256, 257, 1031}) {
      std::vector<float> got(size_t(n) + 1, -3.0f), want(size_t(n) + 1, -3.0f);
      normal_fill(got.data(), n, key, first, 0.5f);
      for (int64_t j = 0; j < n; ++j) want[size_t(j)] = 0.5f * normal_at(key, 0, first + uint64_t(j));
      expect_same_bits(got, want, "first " + std::to_string(first) + " n " + std::to_string(n));  // incl. the guard
    }
}

}  // namespace
}  // namespace occ
