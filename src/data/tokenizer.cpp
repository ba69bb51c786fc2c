#include "data/tokenizer.h"

#include "core/error.h"
#include "data/gpt2_bpe_tokenizer.h"
#include "data/sentencepiece_tokenizer.h"

namespace occ {

TokenizerType parse_tokenizer_type(const std::string& name) {
  if (name == "SentencePieceTokenizer") return TokenizerType::SentencePiece;
  if (name == "GPT2BPETokenizer") return TokenizerType::Gpt2Bpe;
  fail("--tokenizer-type {} is not supported; use SentencePieceTokenizer (with --tokenizer-model) or "
       "GPT2BPETokenizer (with --vocab-file and --merge-file)",
       name);
}

const char* tokenizer_type_name(TokenizerType type) {
  return type == TokenizerType::Gpt2Bpe ? "GPT2BPETokenizer" : "SentencePieceTokenizer";
}

void TokenizerSpec::validate() const {
  if (type == TokenizerType::SentencePiece) {
    OCC_CHECK(vocab_file.empty() && merge_file.empty(),
              "--vocab-file and --merge-file belong to --tokenizer-type GPT2BPETokenizer; pass that type, or use "
              "--tokenizer-model for a SentencePiece model");
    return;
  }
  OCC_CHECK(model.empty(),
            "--tokenizer-model names a SentencePiece model, but --tokenizer-type is GPT2BPETokenizer; give "
            "--vocab-file and --merge-file instead, or drop --tokenizer-type");
  OCC_CHECK(!vocab_file.empty() && !merge_file.empty(),
            "--tokenizer-type GPT2BPETokenizer needs --vocab-file (encoder.json / vocab.json) and --merge-file "
            "(vocab.bpe / merges.txt)");
}

std::unique_ptr<Tokenizer> load_tokenizer(const TokenizerSpec& spec) {
  spec.validate();
  if (spec.type == TokenizerType::Gpt2Bpe) return Gpt2BpeTokenizer::load(spec.vocab_file, spec.merge_file);
  OCC_CHECK(!spec.model.empty(), "no tokenizer given; pass --tokenizer-model FILE (or --tokenizer-type "
                                 "GPT2BPETokenizer with --vocab-file and --merge-file)");
  return SentencePieceTokenizer::load(spec.model);
}

}  // namespace occ
