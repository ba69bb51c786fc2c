// Fuzzes GPT-2 BPE loading (--vocab-file JSON, --merge-file lines and their
// consistency with the vocabulary), then encodes and decodes a text with it.
// Input: split_two -> vocab file, merge file.
#include "data/gpt2_bpe_tokenizer.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace occ;
  const auto parts = fuzz::split_two(fuzz::as_view(data, size));
  const std::string vocab = fuzz::scratch_dir() + "/vocab.json", merges = fuzz::scratch_dir() + "/merges.txt";
  fuzz::write_file(vocab, parts.first);
  fuzz::write_file(merges, parts.second);
  fuzz::parse_or_refuse([&] {
    const auto tok = Gpt2BpeTokenizer::load(vocab, merges);
    const std::vector<int32_t> ids =
        tok->encode("In the beginning God's heaven and earth.\n  Caf\xc3\xa9 \xe2\x82\xac 1234 \t\x01 \xff\xfe");
    (void)tok->decode(ids);
    (void)tok->eod_id();
  });
  return 0;
}
