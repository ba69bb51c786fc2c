#pragma once
// OpenAI's GPT-2 byte-level BPE (Megatron's GPT2BPETokenizer). Text is cut into
// pieces by GPT-2's pattern (contractions, letter runs, digit runs, other
// symbols, whitespace; each with at most one leading space), every byte of a
// piece becomes one of 256 printable characters, and the piece's symbols are
// merged pairwise in the order of the merge file's ranks; the vocabulary maps
// the final symbols to ids. <|endoftext|> is the end-of-document token.
//
// Input text is UTF-8; an invalid sequence is read as U+FFFD first, as
// JavaScript's and Python's decoders do. "Whitespace" is JavaScript's \s,
// letters and digits are the Unicode categories L and N, so that ids equal
// those of the npm package gpt-3-encoder (tests/cli/gpt2_bpe.sh checks that).
#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "data/tokenizer.h"

namespace occ {

class Gpt2BpeTokenizer final : public Tokenizer {
 public:
  // vocab_file: JSON object token -> id, ids 0..N-1 each once (encoder.json,
  // vocab.json). merge_file: a first line (the "#version" header) that is
  // skipped, then one "left right" merge per line, highest priority first
  // (vocab.bpe, merges.txt). Every byte's symbol and every merge's result must
  // be in the vocabulary. Throws a one-line occ::Error naming file and line.
  static std::unique_ptr<Gpt2BpeTokenizer> load(const std::string& vocab_file, const std::string& merge_file);
  ~Gpt2BpeTokenizer() override;

  std::vector<int32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int vocab_size() const override { return int(decoder_.size()); }
  int eod_id() const override { return eod_; }
  std::string describe() const override;

  // The vocabulary (id -> symbol string) and the merges ("left right", highest
  // priority first), as exporters write them (GGUF's tokenizer.ggml.tokens / merges).
  const std::vector<std::string>& symbols() const { return decoder_; }
  std::vector<std::string> merges() const;

  // The pieces GPT-2's pattern cuts `text` into (exposed for tests).
  std::vector<std::string> pretokenize(const std::string& text) const;

 private:
  struct Pattern;  // the compiled PCRE2 expression
  Gpt2BpeTokenizer();
  void bpe(const std::string& piece, std::vector<int32_t>& out) const;

  std::string vocab_file_, merge_file_;
  std::unordered_map<std::string, int32_t> encoder_;
  std::vector<std::string> decoder_;             // id -> symbol string (UTF-8)
  std::unordered_map<std::string, int> ranks_;   // "left right" -> merge rank
  std::array<std::string, 256> byte_symbol_;     // byte -> its printable character (UTF-8)
  std::unordered_map<uint32_t, uint8_t> symbol_byte_;  // that character's code point -> byte
  int eod_ = -1;
  std::unique_ptr<Pattern> pattern_;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;  // piece -> ids
};

}  // namespace occ
