#pragma once
// SentencePiece tokenizer: BPE with byte fallback (any UTF-8 or binary text
// encodes without <unk>), identity normalisation (decode(encode(s)) == s), and
// the eos piece as the end-of-document token appended after every document.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace occ {

class Tokenizer {
 public:
  // Throws "cannot load tokenizer model X: ...; check --tokenizer-model".
  static Tokenizer load(const std::string& model_path);
  // Trains on the lines of `documents` (each line is one training sentence)
  // and writes MODEL_PREFIX.model and MODEL_PREFIX.vocab. Deterministic for a
  // given input of up to kMaxTrainingSentences lines.
  static void train(const std::vector<std::string>& documents, int vocab_size, const std::string& model_prefix);
  static constexpr int64_t kMaxTrainingSentences = 2'000'000;

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  std::vector<int32_t> encode(const std::string& text) const;
  // Throws on ids outside [0, vocab_size()).
  std::string decode(const std::vector<int32_t>& ids) const;
  int vocab_size() const;
  // The eos id; -1 when the model has none (then documents cannot be separated).
  int eod_id() const;
  const std::string& path() const { return path_; }

 private:
  Tokenizer();
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::string path_;
};

}  // namespace occ
