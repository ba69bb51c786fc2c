// Fuzzes preprocess's corpus reader (DocumentReader: plain text or JSONL, each
// optionally zstd-compressed). Input: one byte choosing the file name's
// suffix (bit 0: .jsonl, else .txt), then the file.
#include "data/document_reader.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace occ;
  if (size < 1) return 0;
  const std::string path = fuzz::scratch_dir() + ((data[0] & 1) ? "/corpus.jsonl" : "/corpus.txt");
  fuzz::write_file(path, fuzz::as_view(data + 1, size - 1));
  fuzz::parse_or_refuse([&] {
    DocumentReader reader(path);
    std::string doc;
    while (reader.next(doc)) {
    }
  });
  return 0;
}
