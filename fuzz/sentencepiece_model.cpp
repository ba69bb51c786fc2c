// Fuzzes SentencePiece model loading as --tokenizer-model does it
// (SentencePieceTokenizer::load), then encodes and decodes a text with the loaded model.
// The library itself is Debian's (not instrumented for coverage): this harness
// finds what a damaged model does to our process, through our wrapper.
#include "data/sentencepiece_tokenizer.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace occ;
  const std::string path = fuzz::scratch_dir() + "/tokenizer.model";
  fuzz::write_file(path, fuzz::as_view(data, size));
  fuzz::parse_or_refuse([&] {
    const auto tok = SentencePieceTokenizer::load(path);
    const std::vector<int32_t> ids =
        tok->encode("In the beginning God created the heaven and the earth.\n  Caf\xc3\xa9 \xe2\x82\xac 1234 \t\x01");
    const std::string text = tok->decode(ids);
    (void)text;
    (void)tok->eod_id();
  });
  return 0;
}
