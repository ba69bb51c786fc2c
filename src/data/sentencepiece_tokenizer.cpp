#include "data/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <unordered_map>

#include "core/error.h"

namespace occ {
namespace {

// SentencePiece statuses may span lines and start with "./src/x.cc(660)
// [condition] "; errors here are one line of the readable part.
std::string one_line(std::string s) {
  if (s.rfind("./src/", 0) == 0 && s.find("] ") != std::string::npos) s = s.substr(s.find("] ") + 2);
  // Line breaks become spaces; other control bytes (a damaged model's piece
  // names are quoted in statuses: found by fuzz/sentencepiece_model.cpp) '?'.
  for (char& c : s)
    if (c == '\n') c = ' ';
    else if (static_cast<unsigned char>(c) < 32 || c == 127) c = '?';
  while (!s.empty() && (s.back() == ' ' || s.back() == '.')) s.pop_back();
  return s.empty() ? "no details" : s;
}

// Feeds the non-empty lines of the documents to the trainer without copying
// the corpus into one big file.
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::vector<std::string>& docs) : docs_(docs) { advance(); }
  bool done() const override { return done_; }
  void Next() override { advance(); }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return sentencepiece::util::Status(); }

 private:
  void advance() {
    while (doc_ < docs_.size() && emitted_ < SentencePieceTokenizer::kMaxTrainingSentences) {
      const std::string& d = docs_[doc_];
      if (pos_ > d.size()) {
        ++doc_;
        pos_ = 0;
        continue;
      }
      size_t nl = d.find('\n', pos_);
      if (nl == std::string::npos) nl = d.size();
      line_.assign(d, pos_, nl - pos_);
      pos_ = nl + 1;
      if (!line_.empty()) {
        ++emitted_;
        return;
      }
    }
    done_ = true;
  }

  const std::vector<std::string>& docs_;
  size_t doc_ = 0, pos_ = 0;
  int64_t emitted_ = 0;
  std::string line_;
  bool done_ = false;
};

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer() : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::load(const std::string& model_path) {
  {
    std::ifstream probe(model_path, std::ios::binary);
    OCC_CHECK(probe.good(), "cannot load tokenizer model {}: {}; check --tokenizer-model", model_path,
              std::strerror(errno));
  }
  std::unique_ptr<SentencePieceTokenizer> t(new SentencePieceTokenizer());
  t->path_ = model_path;
  sentencepiece::util::Status status;
  try {
    status = t->sp_->Load(model_path);
  } catch (const std::exception& e) {
    // The library's own trie builder throws on some damaged models (found by
    // fuzz/sentencepiece_model.cpp: "failed to insert key: zero-length key").
    fail("cannot load tokenizer model {}: not a valid SentencePiece model ({}); check --tokenizer-model", model_path,
         one_line(e.what()));
  }
  OCC_CHECK(status.ok(), "cannot load tokenizer model {}: not a valid SentencePiece model ({}); check --tokenizer-model",
            model_path, one_line(status.error_message()));
  return t;
}

void SentencePieceTokenizer::train(const std::vector<std::string>& documents, int vocab_size, const std::string& model_prefix) {
  OCC_CHECK(vocab_size >= 300 && vocab_size <= 1'000'000,
            "--vocab-size {} is out of range; use 300 to 1000000 (byte fallback alone needs 256 pieces)", vocab_size);
  const unsigned threads = std::clamp(std::thread::hardware_concurrency(), 1u, 64u);
  const std::unordered_map<std::string, std::string> args = {
      {"model_prefix", model_prefix},
      {"vocab_size", std::to_string(vocab_size)},
      {"model_type", "bpe"},
      {"byte_fallback", "true"},
      // Identity normalisation and kept whitespace make decode exact.
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"split_digits", "true"},
      {"character_coverage", "0.9995"},
      {"unk_id", "0"},
      {"eos_id", "1"},
      {"bos_id", "-1"},
      {"pad_id", "-1"},
      // Above this the trainer samples lines; below it, it uses all of them
      // in order, so the model is a pure function of the input.
      {"input_sentence_size", std::to_string(kMaxTrainingSentences)},
      {"shuffle_input_sentence", "true"},
      {"max_sentence_length", "16384"},
      {"num_threads", std::to_string(threads)},
      {"minloglevel", "2"},  // silence progress logging
  };
  const std::filesystem::path parent = std::filesystem::path(model_prefix).parent_path();
  std::error_code ec;  // a failure shows up as the trainer's "cannot write" below
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  LineIterator lines(documents);
  OCC_CHECK(!lines.done(), "cannot train a tokenizer: the input has no text");
  auto status = sentencepiece::SentencePieceTrainer::Train(args, &lines);
  OCC_CHECK(status.ok(), "tokenizer training failed: {}; adjust --vocab-size or the input",
            one_line(status.error_message()));
}

std::vector<int32_t> SentencePieceTokenizer::encode(const std::string& text) const {
  std::vector<int> ids;
  auto status = sp_->Encode(text, &ids);
  OCC_CHECK(status.ok(), "cannot tokenize text with {}: {}", path_, one_line(status.error_message()));
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::string SentencePieceTokenizer::decode(const std::vector<int32_t>& ids) const {
  const int n = vocab_size();
  for (int32_t id : ids)
    OCC_CHECK(id >= 0 && id < n, "token id {} is outside the vocabulary of {} ({} pieces); the model and tokenizer do not match",
              id, path_, n);
  std::string text;
  auto status = sp_->Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  OCC_CHECK(status.ok(), "cannot decode tokens with {}: {}", path_, one_line(status.error_message()));
  return text;
}

std::vector<SentencePieceTokenizer::Piece> SentencePieceTokenizer::pieces() const {
  std::vector<Piece> out(static_cast<size_t>(vocab_size()));
  for (int id = 0; id < vocab_size(); ++id) {
    Piece& p = out[size_t(id)];
    p.text = sp_->IdToPiece(id);
    p.score = sp_->GetScore(id);
    p.kind = sp_->IsUnknown(id)  ? PieceKind::Unknown
             : sp_->IsControl(id) ? PieceKind::Control
             : sp_->IsUnused(id)  ? PieceKind::Unused
             : sp_->IsByte(id)    ? PieceKind::Byte
                                  : PieceKind::Normal;
  }
  return out;
}

int SentencePieceTokenizer::unk_id() const { return sp_->unk_id(); }
int SentencePieceTokenizer::bos_id() const { return sp_->bos_id(); }

bool SentencePieceTokenizer::adds_dummy_prefix() const {
  // The model's normalizer_spec is not in the library's public headers: ask the encoder.
  std::vector<std::string> pieces;
  const auto status = sp_->Encode("x", &pieces);
  return status.ok() && !pieces.empty() && pieces[0].rfind("\xe2\x96\x81", 0) == 0;
}

int SentencePieceTokenizer::vocab_size() const { return sp_->GetPieceSize(); }

int SentencePieceTokenizer::eod_id() const { return sp_->eos_id(); }

}  // namespace occ
