#pragma once
// The documents of a text corpus, as `preprocess --input` reads them. Plain
// text: documents are separated by one or more blank lines and their lines
// joined with "\n". .json/.jsonl: one JSON object per line whose "text" field
// is a document, as Megatron's preprocess_data.py reads (or, with `keys`, one
// document per named field: its --json-keys). Either may be
// zstd-compressed (detected by the frame magic, so no particular name is
// needed; a ".zst" suffix is ignored when choosing text or JSON). Lines end in
// "\n" or "\r\n". Every defect (unreadable file, bad zstd data, a line that
// is not a JSON object with a "text" string) is a one-line occ::Error naming
// the file and line.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace occ {

class LineReader;

class DocumentReader {
 public:
  // keys: the JSON fields read (default "text"); ignored for plain text.
  explicit DocumentReader(const std::string& path, std::vector<std::string> keys = {"text"});
  ~DocumentReader();
  DocumentReader(const DocumentReader&) = delete;
  DocumentReader& operator=(const DocumentReader&) = delete;

  // The next document into `doc`; false at the end of the input. JSON: the
  // first key's field, which may be empty (an empty document, as Megatron's
  // preprocess_data.py writes it); a plain-text document is never empty.
  bool next(std::string& doc);
  // JSON: the next line's fields, one per key (any may be empty); plain text:
  // the next document as the one field. False at the end of the input.
  bool next_fields(std::vector<std::string>& fields);
  bool is_json() const { return json_; }

 private:
  void json_fields(const std::string& line, std::vector<std::string>& fields) const;

  std::string path_;
  std::vector<std::string> keys_;
  std::unique_ptr<LineReader> lines_;
  bool json_ = false;
  int64_t line_no_ = 0;
};

}  // namespace occ
