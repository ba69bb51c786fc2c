#pragma once
// SentencePiece tokenizer: BPE with byte fallback (any UTF-8 or binary text
// encodes without <unk>), identity normalisation (decode(encode(s)) == s), and
// the eos piece as the end-of-document token appended after every document.
#include <memory>

#include "data/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace occ {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // Throws "cannot load tokenizer model X: ...; check --tokenizer-model".
  static std::unique_ptr<SentencePieceTokenizer> load(const std::string& model_path);
  // Trains on the lines of `documents` (each line is one training sentence)
  // and writes MODEL_PREFIX.model and MODEL_PREFIX.vocab. Deterministic for a
  // given input of up to kMaxTrainingSentences lines.
  static void train(const std::vector<std::string>& documents, int vocab_size, const std::string& model_prefix);
  static constexpr int64_t kMaxTrainingSentences = 2'000'000;

  ~SentencePieceTokenizer() override;

  std::vector<int32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int vocab_size() const override;
  int eod_id() const override;
  std::string describe() const override { return "SentencePiece model " + path_; }
  const std::string& path() const { return path_; }

  // The vocabulary as exporters write it (GGUF's tokenizer.ggml.*): each
  // piece's text, score and kind (llama.cpp's token types).
  enum class PieceKind { Normal = 1, Unknown = 2, Control = 3, Unused = 5, Byte = 6 };
  struct Piece {
    std::string text;
    float score = 0.0f;
    PieceKind kind = PieceKind::Normal;
  };
  std::vector<Piece> pieces() const;
  int unk_id() const;
  int bos_id() const;  // -1: none (our trained models have none)
  // Whether encoding prepends U+2581 to the text (SentencePiece's add_dummy_prefix).
  bool adds_dummy_prefix() const;

 private:
  SentencePieceTokenizer();
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::string path_;
};

}  // namespace occ
