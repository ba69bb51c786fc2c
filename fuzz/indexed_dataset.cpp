// Fuzzes the Megatron .idx/.bin reader (IndexedDataset::open, validate, read)
// and the GPT samples built over it as train builds them (Megatron's split,
// epochs and shuffles into the index cache, samples read with the vocabulary
// check). Input: split_two -> PREFIX.idx, PREFIX.bin.
#include <algorithm>

#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace occ;
  const auto parts = fuzz::split_two(fuzz::as_view(data, size));
  const std::string prefix = fuzz::scratch_dir() + "/data";
  fuzz::write_file(prefix + ".idx", parts.first);
  fuzz::write_file(prefix + ".bin", parts.second);
  fuzz::parse_or_refuse([&] {
    IndexedDataset ds = IndexedDataset::open(prefix);
    std::vector<int32_t> tokens;
    for (int64_t s = 0; s < std::min<int64_t>(ds.num_sequences(), 64); ++s) {
      // Before validate() a size may be anything (negative, 2^31 - 1): the buffer is
      // bounded here, and read() must refuse a count its sequence or .bin cannot hold.
      const int64_t length = ds.sequence_length(s);
      tokens.resize(size_t(std::clamp<int64_t>(length, 0, int64_t(1) << 20)));
      ds.read(s, 0, std::min<int64_t>(length, int64_t(tokens.size())), tokens.data());
    }
    ds.validate();
    // What train does with it: a 90/10 split, samples of 8 (+1) tokens, two epochs' worth.
    const auto bookends = split_matrix("90,10,0");
    const SequenceRange range = split_sequences(*bookends[0], ds.num_sequences());
    if (range.size() > 0 && ds.num_sequences() < 4096) {
      const GptDatasetSpec spec{prefix, range, 40, "train", 8, 1234};
      CachedArrays cache = gpt_index_cache(spec, fuzz::scratch_dir() + "/cache");
      build_gpt_indices(spec, ds, plan_gpt_part(spec, ds), cache, nullptr);
      auto hit = cache.find();
      if (!hit) return;
      GptDataset train(ds, spec, std::move(*hit), 4096);
      std::vector<int32_t> sample(9);
      for (int64_t i = 0; i < std::min<int64_t>(train.size(), 64); ++i) train.sample(i, sample.data());
    }
  });
  return 0;
}
