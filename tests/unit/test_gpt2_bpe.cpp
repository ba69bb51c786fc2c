// GPT-2 byte-level BPE on a small hand-made vocabulary: the pattern's pieces,
// merges applied in rank order, byte round trips (invalid UTF-8 read as
// U+FFFD), and one-line errors for malformed vocabulary and merge files.
// (Agreement with OpenAI's encoder on GPT-2's real files: tests/cli/gpt2_bpe.sh.)
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/gpt2_bpe_tokenizer.h"
#include "temp_dir.h"

namespace {

// GPT-2's byte -> character table, written out independently of the tokenizer.
std::string byte_char(int b) {
  static const std::vector<uint32_t> table = [] {
    std::vector<uint32_t> t(256);
    uint32_t next = 256;
    for (int i = 0; i < 256; ++i) {
      const bool kept = (i >= 33 && i <= 126) || (i >= 161 && i <= 172) || (i >= 174 && i <= 255);
      t[size_t(i)] = kept ? uint32_t(i) : next++;
    }
    return t;
  }();
  const uint32_t cp = table[size_t(b)];
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

struct Files {
  occ::test::TempDir dir{"bpe"};
  std::string vocab = dir / "vocab.json", merges = dir / "merges.txt";
  // The 256 byte symbols (ids 0..255), the merges' results, <|endoftext|>.
  void write(const std::vector<std::pair<std::string, std::string>>& merge_list, bool trailing_newline = true,
             const std::vector<std::string>& extra = {}) {
    nlohmann::json v = nlohmann::json::object();
    int id = 0;
    for (int b = 0; b < 256; ++b) v[byte_char(b)] = id++;
    for (const auto& [l, r] : merge_list)
      if (!v.contains(l + r)) v[l + r] = id++;
    for (const auto& e : extra) v[e] = id++;
    v["<|endoftext|>"] = id++;
    std::ofstream(vocab) << v.dump();
    std::ofstream m(merges);
    m << "#version: 0.2\n";
    for (size_t i = 0; i < merge_list.size(); ++i)
      m << merge_list[i].first << " " << merge_list[i].second << (i + 1 < merge_list.size() || trailing_newline ? "\n" : "");
  }
};

const std::string G = byte_char(' ');  // "Ġ"

std::vector<std::pair<std::string, std::string>> the_merges() {
  return {{G, "t"}, {"h", "e"}, {G + "t", "he"}, {"i", "n"}, {G, "in"}};
}

void expect_refused(const Files& f, const std::string& needle) {
  try {
    occ::Gpt2BpeTokenizer::load(f.vocab, f.merges);
    ADD_FAILURE() << "loaded files that should fail with '" << needle << "'";
  } catch (const occ::Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(needle), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

}  // namespace

TEST(Gpt2Bpe, PiecesFollowGpt2sPattern) {
  Files f;
  f.write(the_merges());
  const auto tok = occ::Gpt2BpeTokenizer::load(f.vocab, f.merges);
  using V = std::vector<std::string>;
  EXPECT_EQ(tok->pretokenize("I'm here  now\n"), (V{"I", "'m", " here", " ", " now", "\n"}));
  EXPECT_EQ(tok->pretokenize("don't 42x  ?!\t\t"), (V{"don", "'t", " 42", "x", " ", " ?!", "\t\t"}));
  // JavaScript's \s: U+00A0 and U+3000 are whitespace, U+0085 is not.
  EXPECT_EQ(tok->pretokenize("a\u00a0b\u3000c\u0085d"), (V{"a", "\u00a0", "b", "\u3000", "c", "\u0085", "d"}));
  EXPECT_EQ(tok->pretokenize("caf\u00e9 \u4f60\u597d 12\u0663"), (V{"caf\u00e9", " \u4f60\u597d", " 12\u0663"}));
}

TEST(Gpt2Bpe, MergesApplyInRankOrder) {
  Files f;
  f.write(the_merges());
  const auto tok = occ::Gpt2BpeTokenizer::load(f.vocab, f.merges);
  // " the": "Ġ t" (rank 0), then "h e" (1), then "Ġt he" (2): one token, id 258.
  EXPECT_EQ(tok->encode(" the"), (std::vector<int32_t>{258}));
  // "the" has no "Ġ": "h e" only, then "t he" is no merge.
  const std::vector<int32_t> the = tok->encode("the");
  ASSERT_EQ(the.size(), 2u);
  EXPECT_EQ(tok->decode({the[1]}), "he");
  // " in": "i n" (3) first, then "Ġ in" (4).
  EXPECT_EQ(tok->decode(tok->encode(" in")), " in");
  EXPECT_EQ(tok->encode(" in").size(), 1u);
  EXPECT_EQ(tok->eod_id(), tok->vocab_size() - 1);
  EXPECT_EQ(tok->vocab_size(), 256 + 5 + 1);
}

TEST(Gpt2Bpe, BytesRoundTripAndInvalidUtf8BecomesReplacementCharacter) {
  Files f;
  f.write(the_merges());
  const auto tok = occ::Gpt2BpeTokenizer::load(f.vocab, f.merges);
  const std::string text = "The \u00e9l\u00e8ve's \U0001F600 \t\r\n\x01\x7f done";
  EXPECT_EQ(tok->decode(tok->encode(text)), text);
  // 0xFF and a truncated 3-byte sequence: each one U+FFFD, as JavaScript's decoder reads them.
  EXPECT_EQ(tok->decode(tok->encode("a\xff" "b\xe2\x82" "c")), "a\ufffd" "b\ufffd" "c");
  EXPECT_EQ(tok->decode({tok->eod_id()}), "<|endoftext|>");
  EXPECT_THROW(tok->decode({tok->vocab_size()}), occ::Error);
  EXPECT_THROW(tok->decode({-1}), occ::Error);
}

TEST(Gpt2Bpe, TheLastMergeWithoutANewlineIsDroppedAsGpt2sLoaderDoes) {
  Files f;
  f.write(the_merges(), /*trailing_newline=*/false);
  const auto tok = occ::Gpt2BpeTokenizer::load(f.vocab, f.merges);
  EXPECT_EQ(tok->encode(" in").size(), 2u);  // "Ġ in" (the last line) is not a merge
}

TEST(Gpt2Bpe, MalformedFilesAreRefusedNamingTheDefect) {
  Files f;
  f.write(the_merges());
  std::ofstream(f.vocab) << "[1, 2]";
  expect_refused(f, "is not a JSON object");
  f.write(the_merges());
  {
    nlohmann::json v = nlohmann::json::parse(std::ifstream(f.vocab));
    v["he"] = 0;  // two tokens with id 0
    std::ofstream(f.vocab) << v.dump();
  }
  expect_refused(f, "given to two tokens");
  f.write(the_merges());
  {
    nlohmann::json v = nlohmann::json::parse(std::ifstream(f.vocab));
    v.erase(byte_char('a'));
    std::ofstream(f.vocab) << v.dump();
  }
  expect_refused(f, "not an integer in [0, ");  // the ids are no longer 0..N-1
  f.write(the_merges(), true, {"\u4f60"});  // not a byte symbol
  expect_refused(f, "not one of GPT-2's 256 byte symbols");
  f.write(the_merges());
  std::ofstream(f.merges) << "#version: 0.2\nh e x\n";
  expect_refused(f, "line 2 is not one merge");
  std::ofstream(f.merges) << "#version: 0.2\nh e\nq z\n";
  expect_refused(f, "line 3 merges 'q' and 'z'");
  std::ofstream(f.merges) << "#version: 0.2\nh e\nh e\n";
  expect_refused(f, "line 3 repeats an earlier merge");
  std::ofstream(f.merges) << "#version: 0.2\n\n";
  expect_refused(f, "line 2 is not one merge");
}
