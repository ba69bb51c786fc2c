// Fuzzes the Megatron .idx/.bin reader (IndexedDataset::open, read,
// check_token_range) and the GPT samples built over it (split, epochs, shuffle).
// Input: split_two -> PREFIX.idx, PREFIX.bin.
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
    for (int64_t s = 0; s < ds.num_sequences(); ++s) {
      tokens.resize(size_t(ds.sequence_length(s)));
      ds.read(s, 0, int64_t(tokens.size()), tokens.data());
    }
    check_token_range(ds, 4096, "the fuzzed dataset");
    // What train does with it: a 90/10 split, samples of 8 (+1) tokens, two epochs' worth.
    const auto splits = split_documents(ds.num_documents(), "90,10,0");
    if (splits[0].size() > 0) {
      GptDataset train(ds, splits[0], 8, 0, 1234);
      GptDataset again(ds, splits[0], 8, 2 * train.size() + 1, 1234);
      std::vector<int32_t> sample(9);
      for (int64_t i = 0; i < std::min<int64_t>(again.size(), 64); ++i) again.sample(i, sample.data());
    }
  });
  return 0;
}
