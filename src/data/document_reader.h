#pragma once
// The documents of a text corpus, as `preprocess --input` reads them. Plain
// text: documents are separated by one or more blank lines and their lines
// joined with "\n". .json/.jsonl: one JSON object per line whose "text" field
// is a document, as Megatron's preprocess_data.py reads. Either may be
// zstd-compressed (detected by the frame magic, so no particular name is
// needed; a ".zst" suffix is ignored when choosing text or JSON). Lines end in
// "\n" or "\r\n". Every defect (unreadable file, bad zstd data, a line that
// is not a JSON object with a "text" string) is a one-line occ::Error naming
// the file and line.
#include <cstdint>
#include <memory>
#include <string>

namespace occ {

class LineReader;

class DocumentReader {
 public:
  explicit DocumentReader(const std::string& path);
  ~DocumentReader();
  DocumentReader(const DocumentReader&) = delete;
  DocumentReader& operator=(const DocumentReader&) = delete;

  // The next document into `doc`; false at the end of the input. A JSON line's
  // "text" may be empty (an empty document, as Megatron's preprocess_data.py
  // writes it); a plain-text document never is.
  bool next(std::string& doc);

 private:
  std::string json_text(const std::string& line) const;

  std::string path_;
  std::unique_ptr<LineReader> lines_;
  bool json_ = false;
  int64_t line_no_ = 0;
};

}  // namespace occ
