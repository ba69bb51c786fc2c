// optimus-cc preprocess: text corpus -> tokenizer (loaded or trained) -> Megatron .bin/.idx.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "apps/commands/train_flags.h"
#include "apps/commands/commands.h"
#include "core/error.h"
#include "core/timer.h"
#include "data/document_reader.h"
#include "data/indexed_dataset.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/tokenizer.h"
#include "data/tokenizer_stamp.h"

namespace occ::cmd {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

int preprocess(int argc, char** argv) {
  CLI::App app{"Tokenize a text corpus into a Megatron .bin/.idx dataset.", "preprocess"};
  std::string input, prefix;
  TokenizerSpec spec;
  int vocab_size = 0;
  bool append_eod = true;
  app.add_option("--input", input,
                 "corpus: plain text with documents separated by blank lines, or .json/.jsonl with a \"text\" "
                 "field per line; zstd-compressed (.zst) accepted")
      ->required();
  app.add_option("--output-prefix", prefix,
                 "writes PREFIX.bin, PREFIX.idx, PREFIX.tokenizer.json (which tokenizer made them) and, if "
                 "training one, PREFIX.model/.vocab")
      ->required();
  add_tokenizer_flags(app, spec);
  auto* vocab_opt = app.add_option("--vocab-size", vocab_size, "train a SentencePiece BPE tokenizer of this size on the input");
  app.add_flag("--append-eod,!--no-append-eod", append_eod,
               "append the end-of-document token to every document (default on)");
  if (int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;

  OCC_CHECK(vocab_opt->count() == 0 || spec.type == TokenizerType::SentencePiece,
            "--vocab-size trains a SentencePiece tokenizer, but --tokenizer-type is GPT2BPETokenizer; drop one of them");
  spec.validate();
  OCC_CHECK(spec.given() != (vocab_opt->count() > 0),
            "pass exactly one of --tokenizer-model FILE (or --tokenizer-type GPT2BPETokenizer with --vocab-file and "
            "--merge-file: use a tokenizer) or --vocab-size N (train a SentencePiece one)");
  OCC_CHECK(!ends_with(prefix, ".bin") && !ends_with(prefix, ".idx"),
            "--output-prefix {} should not end in .bin/.idx; pass the prefix only", prefix);
  const double start = now_seconds();

  // Training reads the corpus once into memory (up to the trainer's sentence
  // cap); when that was all of it, encoding reuses it instead of reading again.
  std::vector<std::string> docs;
  bool have_all = false;
  if (vocab_opt->count() > 0) {
    DocumentReader reader(input);
    int64_t lines = 0;
    std::string doc;
    have_all = true;
    while (reader.next(doc)) {
      lines += 1 + std::count(doc.begin(), doc.end(), '\n');
      docs.push_back(std::move(doc));
      if (lines >= SentencePieceTokenizer::kMaxTrainingSentences) {
        have_all = false;
        break;
      }
    }
    OCC_CHECK(!docs.empty(), "input {} has no documents; check --input", input);
    SentencePieceTokenizer::train(docs, vocab_size, prefix);
    spec.model = prefix + ".model";
  }
  const std::unique_ptr<Tokenizer> loaded = load_tokenizer(spec);
  const Tokenizer& tokenizer = *loaded;
  const int eod = tokenizer.eod_id();
  OCC_CHECK(!append_eod || eod >= 0,
            "tokenizer {} has no end-of-document token (eos, <|endoftext|>); pass --no-append-eod or train one with "
            "--vocab-size",
            tokenizer.describe());

  const int dtype = dtype_for_vocab(tokenizer.vocab_size());
  IndexedDatasetWriter writer(prefix, dtype);
  auto add = [&](const std::string& text) {
    std::vector<int32_t> ids = tokenizer.encode(text);
    // As preprocess_data.py: a text of no tokens is an empty document, without an end-of-document token.
    if (append_eod && !ids.empty()) ids.push_back(eod);
    writer.add_document(ids);
  };
  if (have_all) {
    for (const auto& d : docs) add(d);
  } else {
    docs.clear();
    docs.shrink_to_fit();
    DocumentReader reader(input);
    std::string doc;
    while (reader.next(doc)) add(doc);
  }
  OCC_CHECK(writer.num_documents() > 0, "input {} has no documents; check --input", input);
  writer.finish();
  // Which tokenizer made it (train refuses to blend datasets of different tokenizers),
  // and its largest token id (train refuses a vocabulary too small for it at start-up).
  nlohmann::json stamp = make_tokenizer_stamp(tokenizer, spec);
  stamp["max_token_id"] = writer.max_token_id();
  write_tokenizer_stamp(prefix, stamp);

  fmt::print("preprocess: {} documents, {} tokens ({} vocab {}, {}) -> {}.bin/.idx in {:.1f} s\n",
             writer.num_documents(), writer.num_tokens(), tokenizer.describe(), tokenizer.vocab_size(), dtype_name(dtype),
             prefix, now_seconds() - start);
  return 0;
}

}  // namespace occ::cmd
