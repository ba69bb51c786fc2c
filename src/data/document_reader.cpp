#include "data/document_reader.h"

#include <zstd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"

namespace occ {

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

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

DocumentReader::DocumentReader(const std::string& path, std::vector<std::string> keys)
    : path_(path), keys_(std::move(keys)), lines_(std::make_unique<LineReader>(path)) {
  OCC_CHECK(!keys_.empty(), "internal: a DocumentReader with no JSON keys");
  std::string name = path;
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (ends_with(name, ".zst")) name.resize(name.size() - 4);
  json_ = ends_with(name, ".json") || ends_with(name, ".jsonl");
}

DocumentReader::~DocumentReader() = default;

bool DocumentReader::next(std::string& doc) {
  doc.clear();
  std::string line;
  while (lines_->next(line)) {
    ++line_no_;
    const bool blank = line.find_first_not_of(" \t\r\f\v") == std::string::npos;
    if (json_) {
      if (blank) continue;
      std::vector<std::string> fields;
      json_fields(line, fields);
      doc = std::move(fields[0]);
      return true;  // an empty field too: Megatron writes it as an empty document
    }
    if (blank) {
      if (!doc.empty()) return true;
      continue;
    }
    if (!doc.empty()) doc += '\n';
    doc += line;
  }
  return !doc.empty();  // (plain text: a document is never empty)
}

bool DocumentReader::next_fields(std::vector<std::string>& fields) {
  if (!json_) {
    fields.assign(1, std::string());
    return next(fields[0]);
  }
  std::string line;
  while (lines_->next(line)) {
    ++line_no_;
    if (line.find_first_not_of(" \t\r\f\v") == std::string::npos) continue;
    json_fields(line, fields);
    return true;
  }
  return false;
}

void DocumentReader::json_fields(const std::string& line, std::vector<std::string>& fields) const {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception&) {
    fail("input {} line {} is not valid JSON; expected one object per line such as {{\"{}\": \"...\"}}", path_,
         line_no_, keys_[0]);
  }
  OCC_CHECK(j.is_object(), "input {} line {} is not a JSON object; expected one object per line such as "
            "{{\"{}\": \"...\"}}", path_, line_no_, keys_[0]);
  fields.clear();
  for (const std::string& key : keys_) {
    const auto it = j.find(key);
    OCC_CHECK(it != j.end() && it->is_string(),
              "input {} line {} has no \"{}\" string field; expected one object per line such as "
              "{{\"{}\": \"...\"}}{}",
              path_, line_no_, printable(key), printable(key),
              keys_.size() == 1 && key == "text" ? " (another field: pass --json-keys NAME)" : "");
    fields.push_back(it->get<std::string>());
  }
}

}  // namespace occ
