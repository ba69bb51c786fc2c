// optimus-cc preprocess: text corpus -> tokenizer (loaded or trained) -> Megatron .bin/.idx.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <memory>
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
#include "train/output_paths.h"

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
  std::vector<std::string> json_keys;
  app.add_option("--input", input,
                 "corpus: plain text with documents separated by blank lines, or .json/.jsonl with a \"text\" "
                 "field per line; zstd-compressed (.zst) accepted")
      ->required();
  auto* keys_opt = app.add_option("--json-keys", json_keys,
                                  "JSON fields to tokenize, one dataset each, named PREFIX_KEY_document.bin/.idx as "
                                  "Megatron's preprocess_data.py names them (default: the \"text\" field, as PREFIX.bin/.idx)");
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
  const bool keyed = keys_opt->count() > 0;
  if (!keyed) json_keys = {"text"};
  for (size_t i = 0; i < json_keys.size(); ++i) {
    OCC_CHECK(!json_keys[i].empty(), "--json-keys: an empty key; name the JSON fields to tokenize");
    for (size_t j = 0; j < i; ++j)
      OCC_CHECK(json_keys[i] != json_keys[j], "--json-keys names {} twice; name each field once", json_keys[i]);
  }
  OCC_CHECK(!keyed || DocumentReader(input, json_keys).is_json(),
            "--json-keys reads JSON lines, but --input {} is not .json/.jsonl (optionally .zst); drop --json-keys for "
            "plain text", input);
  // Megatron's names: one dataset per key, PREFIX_KEY_document; without --json-keys, PREFIX.
  std::vector<std::string> prefixes;
  for (const auto& key : json_keys) prefixes.push_back(keyed ? prefix + "_" + key + "_document" : prefix);
  // Every file it writes, checked before the corpus is read: writable, and none of
  // them the input or the tokenizer it reads.
  OutputPaths outputs;
  if (const std::string folder = std::filesystem::path(prefix).parent_path().string(); !folder.empty())
    outputs.dir("--output-prefix", folder);  // created if missing, as before
  for (const auto& p : prefixes) {
    outputs.file("--output-prefix", p + ".bin");
    outputs.file("--output-prefix", p + ".idx");
    outputs.file("--output-prefix", tokenizer_stamp_path(p));
  }
  if (vocab_opt->count() > 0) {
    outputs.file("--output-prefix", prefix + ".model");
    outputs.file("--output-prefix", prefix + ".vocab");
  }
  outputs.input("--input", input);
  outputs.tokenizer_inputs(spec);
  outputs.check();
  const double start = now_seconds();

  // Training reads the corpus once into memory (up to the trainer's sentence
  // cap); when that was all of it, encoding reuses it instead of reading again.
  std::vector<std::string> docs;
  bool have_all = false;
  if (vocab_opt->count() > 0) {
    DocumentReader reader(input, json_keys);
    int64_t lines = 0;
    std::vector<std::string> fields;
    have_all = true;
    // One entry per key per record (empty ones too, so that the encoding pass can reuse them).
    while (have_all && reader.next_fields(fields)) {
      for (auto& doc : fields) {
        lines += 1 + std::count(doc.begin(), doc.end(), '\n');
        docs.push_back(std::move(doc));
      }
      if (lines >= SentencePieceTokenizer::kMaxTrainingSentences) have_all = false;
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
  std::vector<std::unique_ptr<IndexedDatasetWriter>> writers;
  for (const auto& p : prefixes) writers.push_back(std::make_unique<IndexedDatasetWriter>(p, dtype));
  // Field k of a record goes to dataset k; an empty field is an empty document, as Megatron writes it.
  auto add = [&](size_t k, const std::string& text) {
    std::vector<int32_t> ids = tokenizer.encode(text);
    // As preprocess_data.py: a text of no tokens is an empty document, without an end-of-document token.
    if (append_eod && !ids.empty()) ids.push_back(eod);
    writers[k]->add_document(ids);
  };
  if (have_all) {
    for (size_t i = 0; i < docs.size(); ++i) add(i % json_keys.size(), docs[i]);
  } else {
    docs.clear();
    docs.shrink_to_fit();
    DocumentReader reader(input, json_keys);
    std::vector<std::string> fields;
    while (reader.next_fields(fields))
      for (size_t k = 0; k < fields.size(); ++k) add(k, fields[k]);
  }
  for (size_t k = 0; k < writers.size(); ++k) {
    IndexedDatasetWriter& writer = *writers[k];
    OCC_CHECK(writer.num_documents() > 0, "input {} has no documents{}; check --input", input,
              keyed ? fmt::format(" in field \"{}\"", json_keys[k]) : std::string());
    writer.finish();
    // Which tokenizer made it (train refuses to blend datasets of different tokenizers),
    // and its largest token id (train refuses a vocabulary too small for it at start-up).
    nlohmann::json stamp = make_tokenizer_stamp(tokenizer, spec);
    stamp["max_token_id"] = writer.max_token_id();
    write_tokenizer_stamp(prefixes[k], stamp);
    fmt::print("preprocess: {}{} documents, {} tokens ({} vocab {}, {}) -> {}.bin/.idx in {:.1f} s\n",
               keyed ? fmt::format("\"{}\": ", json_keys[k]) : std::string(), writer.num_documents(),
               writer.num_tokens(), tokenizer.describe(), tokenizer.vocab_size(), dtype_name(dtype), prefixes[k],
               now_seconds() - start);
  }
  return 0;
}

}  // namespace occ::cmd
