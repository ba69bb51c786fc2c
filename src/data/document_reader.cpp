#include "data/document_reader.h"

#include <zstd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
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

// Does a file begin with a zstd frame (a compressed one, or a skippable one)?
bool zstd_magic(const unsigned char* b, size_t got) {
  if (got < 4) return false;
  const uint32_t magic = uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16 | uint32_t(b[3]) << 24;
  return magic == ZSTD_MAGICNUMBER || (magic & 0xFFFFFFF0u) == ZSTD_MAGIC_SKIPPABLE_START;
}

int hex4(const std::string& s, size_t at) {  // the value of 4 hex digits at `at`, or -1
  if (at + 4 > s.size()) return -1;
  int v = 0;
  for (size_t k = at; k < at + 4; ++k) {
    const char c = s[k];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

// Python's json module, with which Megatron's preprocess_data.py reads a line,
// accepts three things nlohmann's strict parser refuses: escaped lone
// surrogates ("\ud800", a str Python can hold), numbers beyond a double
// (1e99999: inf) and the literals NaN, Infinity and -Infinity. lenient_copy()
// makes a line strict: a lone surrogate's escape becomes U+FFFD's, such a
// number 0, such a literal null (only text fields are read: a number's value
// never matters), and names the top-level keys whose string value held a lone
// surrogate (their raw tokens), which a used field must not: no UTF-8 text can
// hold one (Megatron's tokenizers fail on it).
struct LenientLine {
  std::string text;
  std::vector<std::string> surrogate_keys;
};

LenientLine lenient_copy(const std::string& line) {
  LenientLine out;
  std::string& o = out.text;
  o.reserve(line.size() + 16);
  std::vector<char> open;  // the containers around the position: '{' or '['
  bool expect_key = false;  // the next string is an object's key
  std::string key;          // the raw token of the current top-level key
  const size_t n = line.size();
  size_t i = 0;
  auto surrogate = [](int u, int lo, int hi) { return u >= lo && u <= hi; };
  while (i < n) {
    const char c = line[i];
    if (c == '"') {
      const size_t start = o.size();
      const bool is_key = !open.empty() && open.back() == '{' && expect_key;
      bool lone = false;
      o += line[i++];
      while (i < n && line[i] != '"') {
        if (line[i] == '\\' && i + 1 < n) {
          const int u = line[i + 1] == 'u' ? hex4(line, i + 2) : -1;
          if (surrogate(u, 0xD800, 0xDBFF) && i + 12 <= n && line[i + 6] == '\\' && line[i + 7] == 'u' &&
              surrogate(hex4(line, i + 8), 0xDC00, 0xDFFF)) {
            o.append(line, i, 12);  // a pair: one character
            i += 12;
          } else if (surrogate(u, 0xD800, 0xDFFF)) {
            o += "\\ufffd";
            i += 6;
            lone = true;
          } else {
            o.append(line, i, 2);
            i += 2;
          }
          continue;
        }
        o += line[i++];
      }
      if (i < n) o += line[i++];
      if (is_key) {
        expect_key = false;
        if (open.size() == 1) key = o.substr(start);
      } else if (lone && open.size() == 1) {
        out.surrogate_keys.push_back(key);
      }
      continue;
    }
    if (c == '{' || c == '[') {
      open.push_back(c);
      expect_key = c == '{';
    } else if (c == '}' || c == ']') {
      if (!open.empty()) open.pop_back();
      expect_key = false;
    } else if (c == ',') {
      expect_key = !open.empty() && open.back() == '{';
    } else if (c == ':') {
      expect_key = false;
    } else if (line.compare(i, 9, "-Infinity") == 0 || line.compare(i, 8, "Infinity") == 0 ||
               line.compare(i, 3, "NaN") == 0) {
      o += "null";
      i += line[i] == '-' ? 9 : line[i] == 'I' ? 8 : 3;
      continue;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      size_t j = i + 1;
      while (j < n && ((line[j] >= '0' && line[j] <= '9') || (line[j] != 0 && std::strchr(".eE+-", line[j])))) ++j;
      const std::string number = line.substr(i, j - i);
      char* end = nullptr;
      const double v = std::strtod(number.c_str(), &end);
      o += end == number.c_str() + number.size() && !std::isfinite(v) ? std::string("0") : number;
      i = j;
      continue;
    }
    o += line[i++];
  }
  return out;
}
}  // namespace

// Lines of a plain or zstd-compressed file (detected by the zstd frame magic,
// so a compressed file needs no particular name). Strips "\n" and "\r\n".
// A file named .zst must be zstd: read as plain text, a damaged or foreign
// file would be tokenized as its compressed bytes.
class LineReader {
 public:
  LineReader(const std::string& path, bool zst_name) : path_(path) {
    file_ = std::fopen(path.c_str(), "rb");
    OCC_CHECK(file_, "cannot open input {}: {}; check --input", path, std::strerror(errno));
    unsigned char magic[4] = {};
    size_t got = std::fread(magic, 1, 4, file_);
    std::rewind(file_);
    if (zst_name && !zstd_magic(magic, got)) {
      std::fclose(file_);
      file_ = nullptr;
      fail("input {} is not a zstd stream (it does not begin with a zstd frame, as its .zst name says); give the "
           "compressed file as zstd wrote it, or drop the .zst from the name of a plain-text file",
           path);
    }
    if (zstd_magic(magic, got)) {
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
    : path_(path), keys_(std::move(keys)) {
  OCC_CHECK(!keys_.empty(), "internal: a DocumentReader with no JSON keys");
  std::string name = path;
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  const bool zst = ends_with(name, ".zst");
  if (zst) name.resize(name.size() - 4);
  json_ = ends_with(name, ".json") || ends_with(name, ".jsonl");
  lines_ = std::make_unique<LineReader>(path, zst);
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
  std::vector<std::string> surrogate_keys;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception&) {
    // What Python's json reads besides (lenient_copy); still refused if not JSON even so.
    LenientLine lenient = lenient_copy(line);
    try {
      j = nlohmann::json::parse(lenient.text);
    } catch (const nlohmann::json::exception&) {
      fail("input {} line {} is not valid JSON; expected one object per line such as {{\"{}\": \"...\"}}", path_,
           line_no_, keys_[0]);
    }
    for (const std::string& raw : lenient.surrogate_keys) {
      try {
        surrogate_keys.push_back(nlohmann::json::parse(raw).get<std::string>());
      } catch (const nlohmann::json::exception&) {  // a key with a lone surrogate of its own: no key we read
      }
    }
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
    OCC_CHECK(std::find(surrogate_keys.begin(), surrogate_keys.end(), key) == surrogate_keys.end(),
              "input {} line {}: its \"{}\" field holds an escaped lone surrogate (a \\ud800-\\udfff escape without "
              "its pair), which is no character: no UTF-8 text can hold it, and Megatron's tokenizers fail on it too; "
              "mend or remove that line",
              path_, line_no_, printable(key));
    fields.push_back(it->get<std::string>());
  }
}

}  // namespace occ
