// The documents `preprocess --input` reads (data/document_reader.h): a file
// named .zst is zstd or refused (issue 48, H8: a damaged or foreign one was
// tokenized as its compressed bytes), and a JSON line is read as Python's json
// reads it, Megatron's preprocess_data.py's reader (issue 48: an escaped lone
// surrogate or 1e99999 in a field not read was refused).
#include <gtest/gtest.h>
#include <zstd.h>

#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/document_reader.h"
#include "temp_dir.h"

namespace occ {
namespace {

using test::TempDir;

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

std::string zstd_of(const std::string& text) {
  std::string out(ZSTD_compressBound(text.size()), '\0');
  const size_t n = ZSTD_compress(out.data(), out.size(), text.data(), text.size(), 3);
  EXPECT_FALSE(ZSTD_isError(n));
  out.resize(n);
  return out;
}

std::vector<std::string> documents(const std::string& path, std::vector<std::string> keys = {"text"}) {
  DocumentReader reader(path, std::move(keys));
  std::vector<std::string> docs;
  std::string doc;
  while (reader.next(doc)) docs.push_back(doc);
  return docs;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

const std::string kText = "In the beginning\nwas the word.\n\nAnd the second document.\n";

TEST(DocumentReader, ZstdIsReadWhateverItsName) {
  TempDir dir;
  write_file(dir / "a.txt.zst", zstd_of(kText));
  write_file(dir / "a.bin", zstd_of(kText));  // recognised by its magic
  const std::vector<std::string> want = {"In the beginning\nwas the word.", "And the second document."};
  EXPECT_EQ(documents(dir / "a.txt.zst"), want);
  EXPECT_EQ(documents(dir / "a.bin"), want);
}

TEST(DocumentReader, ZstNameThatIsNotZstdIsRefused) {
  TempDir dir;
  write_file(dir / "garbage.txt.zst", "this is plain text, not zstd at all\n\nmore text\n");
  std::string e = error_of([&] { documents(dir / "garbage.txt.zst"); });
  EXPECT_NE(e.find("garbage.txt.zst is not a zstd stream"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  // A zstd file whose first byte is damaged.
  std::string damaged = zstd_of(kText);
  damaged[0] = char(damaged[0] ^ 0x01);
  write_file(dir / "damaged.TXT.ZST", damaged);
  e = error_of([&] { documents(dir / "damaged.TXT.ZST"); });
  EXPECT_NE(e.find("damaged.TXT.ZST is not a zstd stream"), std::string::npos) << e;
  // Empty, and shorter than a magic number.
  write_file(dir / "empty.jsonl.zst", "");
  EXPECT_NE(error_of([&] { documents(dir / "empty.jsonl.zst"); }).find("is not a zstd stream"), std::string::npos);
  // A stream cut short or damaged inside is refused too (as before).
  const std::string whole = zstd_of(std::string(20000, 'x') + kText);
  write_file(dir / "cut.txt.zst", whole.substr(0, whole.size() / 2));
  EXPECT_NE(error_of([&] { documents(dir / "cut.txt.zst"); }).find("truncated zstd"), std::string::npos);
  std::string inside = whole;
  for (size_t k = 6; k < inside.size(); ++k) inside[k] = char(inside[k] ^ 0x5a);
  write_file(dir / "inside.txt.zst", inside);
  EXPECT_NE(error_of([&] { documents(dir / "inside.txt.zst"); }).find("zstd"), std::string::npos);
}

TEST(DocumentReader, JsonReadAsPythonReadsIt) {
  TempDir dir;
  // A lone surrogate, a number beyond a double and Python's literals in fields not read.
  write_file(dir / "a.jsonl",
             "{\"text\": \"first\", \"meta\": \"\\ud800 alone\", \"score\": 1e99999}\n"
             "{\"score\": -1e99999, \"text\": \"second \\ud83d\\ude00\", \"nested\": {\"x\": \"\\udc00\", \"y\": [NaN]}}\n"
             "{\"text\": \"third\", \"a\": Infinity, \"b\": -Infinity, \"c\": 123456789012345678901234567890}\n");
  EXPECT_EQ(documents(dir / "a.jsonl"),
            (std::vector<std::string>{"first", "second \xF0\x9F\x98\x80", "third"}));
  // A lone surrogate in a field that is read: no UTF-8 text holds it (Megatron's tokenizers fail on it).
  write_file(dir / "b.jsonl", "{\"text\": \"ok\"}\n{\"title\": \"fine\", \"text\": \"bad \\udfff here\"}\n");
  const std::string e = error_of([&] { documents(dir / "b.jsonl"); });
  EXPECT_NE(e.find("b.jsonl line 2"), std::string::npos) << e;
  EXPECT_NE(e.find("\"text\" field holds an escaped lone surrogate"), std::string::npos) << e;
  // The same line read for another field: accepted.
  write_file(dir / "d.jsonl", "{\"title\": \"fine\", \"text\": \"bad \\udfff here\"}\n");
  EXPECT_EQ(documents(dir / "d.jsonl", {"title"}), (std::vector<std::string>{"fine"}));
  // What Python refuses stays refused.
  for (const char* bad : {"{\"text\": \"x\",}", "{\"text\": 'x'}", "{\"text\": \"x\" \"y\"}", "{\"text\": \"\\x41\"}",
                          "{\"text\": \"x\"} trailing", "{\"text\": \"x\", \"n\": 1e}"}) {
    write_file(dir / "c.jsonl", std::string(bad) + "\n");
    EXPECT_NE(error_of([&] { documents(dir / "c.jsonl"); }).find("is not valid JSON"), std::string::npos) << bad;
  }
}

}  // namespace
}  // namespace occ
