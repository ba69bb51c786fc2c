// optimus-cc preprocess: text corpus -> tokenizer (loaded or trained) -> Megatron .bin/.idx.
#include <fmt/format.h>
#include <zstd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "apps/commands/train_flags.h"
#include "apps/commands/commands.h"
#include "core/error.h"
#include "core/timer.h"
#include "data/indexed_dataset.h"
#include "data/tokenizer.h"

namespace occ::cmd {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Lines of a plain or zstd-compressed file (detected by the zstd frame magic,
// so a compressed file needs no particular name). Strips "\n" and "\r\n".
class LineReader {
 public:
  explicit LineReader(const std::string& path) : path_(path) {
    file_ = std::fopen(path.c_str(), "rb");
    OCC_CHECK(file_, "cannot open input {}: {}; check --input", path, std::strerror(errno));
    unsigned char magic[4] = {};
    size_t got = std::fread(magic, 1, 4, file_);
    std::rewind(file_);
    if (got == 4 && magic[0] == 0x28 && magic[1] == 0xB5 && magic[2] == 0x2F && magic[3] == 0xFD) {
      zstd_ = ZSTD_createDStream();
      OCC_CHECK(zstd_, "internal: ZSTD_createDStream failed");
      in_buf_.resize(ZSTD_DStreamInSize());
    }
    chunk_.resize(zstd_ ? ZSTD_DStreamOutSize() : size_t(1) << 16);
  }
  ~LineReader() {
    if (zstd_) ZSTD_freeDStream(zstd_);
    if (file_) std::fclose(file_);
  }
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  bool next(std::string& line) {
    line.clear();
    while (true) {
      if (begin_ < end_) {
        const char* start = chunk_.data() + begin_;
        const char* nl = static_cast<const char*>(std::memchr(start, '\n', end_ - begin_));
        size_t take = nl ? size_t(nl - start) : end_ - begin_;
        line.append(start, take);
        begin_ += take + (nl ? 1 : 0);
        if (nl) break;
      }
      end_ = fill();
      begin_ = 0;
      if (end_ == 0) {
        if (line.empty()) return false;  // a final line without "\n" still counts
        break;
      }
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    return true;
  }

 private:
  // Refills chunk_; returns the number of bytes, 0 at end of input.
  size_t fill() {
    if (!zstd_) {
      size_t n = std::fread(chunk_.data(), 1, chunk_.size(), file_);
      OCC_CHECK(n > 0 || !std::ferror(file_), "cannot read input {}: {}", path_, std::strerror(errno));
      return n;
    }
    while (true) {
      if (in_.pos == in_.size && !file_eof_) {
        in_.size = std::fread(in_buf_.data(), 1, in_buf_.size(), file_);
        in_.pos = 0;
        in_.src = in_buf_.data();
        OCC_CHECK(!std::ferror(file_), "cannot read input {}: {}", path_, std::strerror(errno));
        file_eof_ = in_.size == 0;
      }
      ZSTD_outBuffer out{chunk_.data(), chunk_.size(), 0};
      size_t ret = ZSTD_decompressStream(zstd_, &out, &in_);
      OCC_CHECK(!ZSTD_isError(ret), "input {} is not valid zstd data ({}); recompress it with zstd", path_,
                ZSTD_getErrorName(ret));
      if (!file_eof_ || out.pos > 0) frame_open_ = ret != 0;
      if (out.pos > 0) return out.pos;
      if (file_eof_) {
        OCC_CHECK(!frame_open_, "input {} is a truncated zstd file; recompress it with zstd", path_);
        return 0;
      }
    }
  }

  std::string path_;
  std::FILE* file_ = nullptr;
  ZSTD_DStream* zstd_ = nullptr;
  std::vector<char> in_buf_, chunk_;
  ZSTD_inBuffer in_{nullptr, 0, 0};
  size_t begin_ = 0, end_ = 0;
  bool file_eof_ = false, frame_open_ = false;
};

// Documents of the input. Plain text: documents are separated by one or more
// blank lines and their lines joined with "\n". .json/.jsonl (also under .zst):
// one JSON object per line whose "text" field is a document, as Megatron's
// preprocess_data.py reads.
class DocumentReader {
 public:
  explicit DocumentReader(const std::string& path) : path_(path), lines_(path) {
    std::string name = path;
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    if (ends_with(name, ".zst")) name.resize(name.size() - 4);
    json_ = ends_with(name, ".json") || ends_with(name, ".jsonl");
  }

  bool next(std::string& doc) {
    doc.clear();
    std::string line;
    while (lines_.next(line)) {
      ++line_no_;
      const bool blank = line.find_first_not_of(" \t\r\f\v") == std::string::npos;
      if (json_) {
        if (blank) continue;
        doc = json_text(line);
        if (!doc.empty()) return true;
        continue;
      }
      if (blank) {
        if (!doc.empty()) return true;
        continue;
      }
      if (!doc.empty()) doc += '\n';
      doc += line;
    }
    return !doc.empty();
  }

 private:
  std::string json_text(const std::string& line) const {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      fail("input {} line {} is not valid JSON; expected one object per line such as {{\"text\": \"...\"}}", path_,
           line_no_);
    }
    OCC_CHECK(j.is_object() && j.contains("text") && j["text"].is_string(),
              "input {} line {} has no \"text\" string field; expected one object per line such as "
              "{{\"text\": \"...\"}}",
              path_, line_no_);
    return j["text"].get<std::string>();
  }

  std::string path_;
  LineReader lines_;
  bool json_ = false;
  int64_t line_no_ = 0;
};

}  // namespace

int preprocess(int argc, char** argv) {
  CLI::App app{"Tokenize a text corpus into a Megatron .bin/.idx dataset.", "preprocess"};
  std::string input, prefix, model_path;
  int vocab_size = 0;
  bool append_eod = true;
  app.add_option("--input", input,
                 "corpus: plain text with documents separated by blank lines, or .json/.jsonl with a \"text\" "
                 "field per line; zstd-compressed (.zst) accepted")
      ->required();
  app.add_option("--output-prefix", prefix, "writes PREFIX.bin and PREFIX.idx (and PREFIX.model/.vocab if training)")
      ->required();
  auto* model_opt = app.add_option("--tokenizer-model", model_path, "existing SentencePiece model to tokenize with");
  auto* vocab_opt = app.add_option("--vocab-size", vocab_size, "train a BPE tokenizer of this size on the input");
  app.add_flag("--append-eod,!--no-append-eod", append_eod,
               "append the end-of-document token to every document (default on)");
  if (int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;

  OCC_CHECK((model_opt->count() > 0) != (vocab_opt->count() > 0),
            "pass exactly one of --tokenizer-model FILE (use a tokenizer) or --vocab-size N (train one)");
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
      if (lines >= Tokenizer::kMaxTrainingSentences) {
        have_all = false;
        break;
      }
    }
    OCC_CHECK(!docs.empty(), "input {} has no documents; check --input", input);
    Tokenizer::train(docs, vocab_size, prefix);
    model_path = prefix + ".model";
  }
  Tokenizer tokenizer = Tokenizer::load(model_path);
  const int eod = tokenizer.eod_id();
  OCC_CHECK(!append_eod || eod >= 0,
            "tokenizer model {} has no end-of-document (eos) piece; pass --no-append-eod or train one with --vocab-size",
            model_path);

  const int dtype = dtype_for_vocab(tokenizer.vocab_size());
  IndexedDatasetWriter writer(prefix, dtype);
  auto add = [&](const std::string& text) {
    std::vector<int32_t> ids = tokenizer.encode(text);
    if (append_eod) ids.push_back(eod);
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

  fmt::print("preprocess: {} documents, {} tokens ({} vocab {}, {}) -> {}.bin/.idx in {:.1f} s\n",
             writer.num_documents(), writer.num_tokens(), tokenizer.path(), tokenizer.vocab_size(), dtype_name(dtype),
             prefix, now_seconds() - start);
  return 0;
}

}  // namespace occ::cmd
