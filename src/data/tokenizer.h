#pragma once
// Tokenizers, chosen as Megatron does (--tokenizer-type):
//   SentencePieceTokenizer (default): our own corpora; `preprocess --vocab-size N`
//     trains one (data/sentencepiece_tokenizer.h), --tokenizer-model FILE loads it.
//   GPT2BPETokenizer: OpenAI's byte-level BPE from --vocab-file (encoder.json /
//     vocab.json) and --merge-file (vocab.bpe / merges.txt), what most Megatron
//     datasets were made with (data/gpt2_bpe_tokenizer.h).
// Both are deterministic, thread-safe for encode/decode, and end every document
// with their end-of-document token when preprocess appends one.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace occ {

enum class TokenizerType { SentencePiece, Gpt2Bpe };
// "SentencePieceTokenizer" | "GPT2BPETokenizer" (Megatron's names); throws otherwise.
TokenizerType parse_tokenizer_type(const std::string& name);
const char* tokenizer_type_name(TokenizerType type);

// The tokenizer flags of a command.
struct TokenizerSpec {
  TokenizerType type = TokenizerType::SentencePiece;
  std::string model;                   // --tokenizer-model (SentencePiece)
  std::string vocab_file, merge_file;  // --vocab-file, --merge-file (GPT-2 BPE)

  // True when a tokenizer is named (its files given); false: none (train may
  // then take --vocab-size instead).
  bool given() const { return !model.empty() || !vocab_file.empty() || !merge_file.empty(); }
  // Throws a one-line occ::Error when the files do not fit the type (a
  // SentencePiece model with GPT2BPETokenizer, a missing --merge-file, ...).
  void validate() const;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  // Throws on ids outside [0, vocab_size()).
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual int vocab_size() const = 0;
  // The end-of-document id; -1 when the tokenizer has none.
  virtual int eod_id() const = 0;
  // For messages: "SentencePiece model X" or "GPT-2 BPE (X, Y)".
  virtual std::string describe() const = 0;
};

// Loads what `spec` names (spec.validate() first).
std::unique_ptr<Tokenizer> load_tokenizer(const TokenizerSpec& spec);

}  // namespace occ
