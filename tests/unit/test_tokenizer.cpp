// SentencePiece tokenizer (train, load, exact round trip) and the preprocess
// command end to end (plain text, .jsonl.zst, error reporting).
#include <gtest/gtest.h>

#include "temp_dir.h"
#include <zstd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "apps/commands/commands.h"
#include "core/error.h"
#include "data/indexed_dataset.h"
#include "data/sentencepiece_tokenizer.h"

namespace fs = std::filesystem;

namespace {

using TempDir = occ::test::TempDir;

// Paragraphs of pseudo-words (a fixed LCG keeps the text identical across runs).
std::vector<std::string> make_documents(int count) {
  const char* words[] = {"the", "lord", "said", "unto", "moses", "and", "aaron", "land", "of", "egypt", "behold",
                         "house", "king", "israel", "water", "bread", "seven", "days", "went", "up", "mountain",
                         "people", "children", "gold", "silver", "tabernacle", "covenant", "spake", "saying", "thou"};
  uint64_t state = 12345;
  auto next = [&](uint64_t n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (state >> 33) % n;
  };
  std::vector<std::string> docs;
  for (int d = 0; d < count; ++d) {
    std::string doc;
    for (uint64_t line = 0, lines = 1 + next(6); line < lines; ++line) {
      if (line) doc += '\n';
      for (uint64_t w = 0, n = 4 + next(8); w < n; ++w) {
        if (w) doc += ' ';
        doc += words[next(std::size(words))];
      }
      doc += next(3) ? "." : ", 12:3;";
    }
    docs.push_back(doc);
  }
  return docs;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

std::string zstd_compress(const std::string& text) {
  std::string out(ZSTD_compressBound(text.size()), '\0');
  size_t n = ZSTD_compress(out.data(), out.size(), text.data(), text.size(), 3);
  out.resize(n);
  return out;
}

int run_preprocess(std::vector<std::string> args) {
  args.insert(args.begin(), "preprocess");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return occ::cmd::preprocess(int(args.size()), argv.data());
}

// Captures stdout for its lifetime, also when an assertion or exception ends the test early.
class StdoutCapture {
 public:
  StdoutCapture() { testing::internal::CaptureStdout(); }
  ~StdoutCapture() {
    if (!done_) testing::internal::GetCapturedStdout();
  }
  std::string text() {
    done_ = true;
    return testing::internal::GetCapturedStdout();
  }

 private:
  bool done_ = false;
};

std::string error_of(const std::vector<std::string>& args) {
  StdoutCapture capture;
  try {
    run_preprocess(args);
  } catch (const occ::Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::vector<int32_t> read_sequence(const occ::IndexedDataset& ds, int64_t i) {
  std::vector<int32_t> out(size_t(ds.sequence_length(i)));
  ds.read(i, 0, int64_t(out.size()), out.data());
  return out;
}

// One small model shared by the tests of this file.
class TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir = new TempDir;
    docs = new std::vector<std::string>(make_documents(300));
    occ::SentencePieceTokenizer::train(*docs, 400, *dir / "spm");
  }
  static void TearDownTestSuite() {
    delete dir;
    delete docs;
  }
  static TempDir* dir;
  static std::vector<std::string>* docs;
};
TempDir* TokenizerTest::dir = nullptr;
std::vector<std::string>* TokenizerTest::docs = nullptr;

}  // namespace

TEST_F(TokenizerTest, TrainsLoadsAndRoundTrips) {
  ASSERT_TRUE(fs::exists(*dir / "spm.model"));
  ASSERT_TRUE(fs::exists(*dir / "spm.vocab"));
  auto tok = occ::SentencePieceTokenizer::load(*dir / "spm.model");
  EXPECT_EQ(tok->vocab_size(), 400);
  EXPECT_EQ(tok->eod_id(), 1);
  for (const auto& d : *docs) {
    auto ids = tok->encode(d);
    ASSERT_FALSE(ids.empty());
    EXPECT_LT(ids.size(), d.size() / 2) << "BPE merges should compress the training text";
    ASSERT_EQ(tok->decode(ids), d);
  }
  // Unseen characters go through byte fallback: no <unk>, exact round trip,
  // whitespace and newlines preserved.
  const std::string odd = "  Héllo\n\nwörld\t😀  end ";
  auto ids = tok->encode(odd);
  for (int32_t id : ids) EXPECT_NE(id, 0) << "unknown token produced";
  EXPECT_EQ(tok->decode(ids), odd);
  // The end-of-document id decodes to nothing and never comes from text.
  EXPECT_EQ(tok->decode({tok->eod_id()}), "");
  for (int32_t id : tok->encode("</s>")) EXPECT_NE(id, tok->eod_id());
}

TEST_F(TokenizerTest, TrainingIsDeterministic) {
  // The model files differ only in the recorded model_prefix, so compare behaviour.
  occ::SentencePieceTokenizer::train(*docs, 400, *dir / "again");
  auto a = occ::SentencePieceTokenizer::load(*dir / "spm.model"), b = occ::SentencePieceTokenizer::load(*dir / "again.model");
  for (const auto& d : *docs) ASSERT_EQ(a->encode(d), b->encode(d));
  std::vector<int32_t> all(400);
  for (int i = 0; i < 400; ++i) all[size_t(i)] = i;
  EXPECT_EQ(a->decode(all), b->decode(all));
}

TEST_F(TokenizerTest, DecodeRejectsIdsOutsideVocabulary) {
  auto tok = occ::SentencePieceTokenizer::load(*dir / "spm.model");
  EXPECT_THROW(tok->decode({400}), occ::Error);
  EXPECT_THROW(tok->decode({-1}), occ::Error);
}

TEST(Tokenizer, GarbageOrMissingModelFailsClearly) {
  TempDir dir;
  write_text(dir / "bad.model", "this is not a sentencepiece model\n");
  for (const std::string& path : {dir / "bad.model", dir / "missing.model"}) {
    try {
      occ::SentencePieceTokenizer::load(path);
      ADD_FAILURE() << "loaded " << path;
    } catch (const occ::Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("cannot load tokenizer model " + path), std::string::npos) << msg;
      EXPECT_NE(msg.find("--tokenizer-model"), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
}

TEST(Tokenizer, TooSmallVocabularyIsRejected) {
  TempDir dir;
  EXPECT_THROW(occ::SentencePieceTokenizer::train(make_documents(10), 100, dir / "m"), occ::Error);
}

TEST_F(TokenizerTest, PreprocessTrainsAndWritesDocuments) {
  std::string text = "\n\n";
  for (const auto& d : *docs) text += d + "\r\n\n \n";  // CRLF and whitespace-only separators
  write_text(*dir / "corpus.txt", text);
  StdoutCapture capture;
  ASSERT_EQ(run_preprocess({"--input", *dir / "corpus.txt", "--output-prefix", *dir / "out/corpus", "--vocab-size",
                            "400"}),
            0);
  std::string summary = capture.text();
  EXPECT_NE(summary.find("300 documents"), std::string::npos) << summary;

  auto tok = occ::SentencePieceTokenizer::load(*dir / "out/corpus.model");
  auto ds = occ::IndexedDataset::open(*dir / "out/corpus");
  EXPECT_EQ(ds.dtype_code(), 8);
  ASSERT_EQ(ds.num_sequences(), int64_t(docs->size()));
  for (size_t i = 0; i < docs->size(); ++i) {
    auto want = tok->encode((*docs)[i]);
    want.push_back(tok->eod_id());
    ASSERT_EQ(read_sequence(ds, int64_t(i)), want) << "document " << i;
  }
}

TEST_F(TokenizerTest, PreprocessReadsZstdJsonLines) {
  std::string jsonl;
  for (size_t i = 0; i < 5; ++i) {
    std::string escaped;
    for (char c : (*docs)[i]) escaped += c == '\n' ? std::string("\\n") : std::string(1, c);
    jsonl += "{\"id\": " + std::to_string(i) + ", \"text\": \"" + escaped + "\"}\n";
    // An empty text is an empty document (Megatron's preprocess_data.py: a document
    // entry without a sequence, no end-of-document token); blank lines are skipped.
    if (i == 2) jsonl += "{\"text\": \"\"}\n\n";
  }
  write_text(*dir / "docs.jsonl.zst", zstd_compress(jsonl));
  for (const bool eod : {false, true}) {
    const std::string out = *dir / (eod ? "js_eod" : "js");
    {
      StdoutCapture capture;
      std::vector<std::string> args = {"--input", *dir / "docs.jsonl.zst", "--output-prefix", out, "--tokenizer-model",
                                       *dir / "spm.model"};
      if (!eod) args.push_back("--no-append-eod");
      ASSERT_EQ(run_preprocess(args), 0);
    }
    auto tok = occ::SentencePieceTokenizer::load(*dir / "spm.model");
    auto ds = occ::IndexedDataset::open(out);
    ASSERT_EQ(ds.num_sequences(), 5);
    ASSERT_EQ(ds.num_documents(), 6);
    EXPECT_EQ(ds.document_start(3), ds.document_start(4)) << "document 3 is the empty one";
    for (int64_t i = 0; i < 5; ++i) {
      auto want = tok->encode((*docs)[size_t(i)]);
      if (eod) want.push_back(tok->eod_id());
      EXPECT_EQ(read_sequence(ds, i), want);
    }
  }
}

TEST_F(TokenizerTest, PreprocessReportsErrorsOnOneLine) {
  const std::string model = *dir / "spm.model", out = *dir / "err";
  write_text(*dir / "empty.txt", "\n \n\n");
  write_text(*dir / "bad.jsonl", "{\"text\": \"ok\"}\n{\"txt\": \"no\"}\n");
  write_text(*dir / "worse.json", "{\"text\": \"ok\"}\nnot json\n");
  std::string z = zstd_compress(std::string(5000, 'a') + "\n");
  write_text(*dir / "cut.txt.zst", z.substr(0, z.size() - 3));
  write_text(*dir / "ok.txt", "hello world\n");

  struct Case {
    std::vector<std::string> args;
    std::string word;
  } cases[] = {
      {{"--input", *dir / "ok.txt", "--output-prefix", out}, "exactly one of"},
      {{"--input", *dir / "ok.txt", "--output-prefix", out, "--tokenizer-model", model, "--vocab-size", "400"},
       "exactly one of"},
      {{"--input", *dir / "empty.txt", "--output-prefix", out, "--tokenizer-model", model}, "has no documents"},
      {{"--input", *dir / "empty.txt", "--output-prefix", out, "--vocab-size", "400"}, "has no documents"},
      {{"--input", *dir / "missing.txt", "--output-prefix", out, "--tokenizer-model", model}, "cannot open input"},
      {{"--input", *dir / "bad.jsonl", "--output-prefix", out, "--tokenizer-model", model}, "line 2"},
      {{"--input", *dir / "worse.json", "--output-prefix", out, "--tokenizer-model", model}, "not valid JSON"},
      {{"--input", *dir / "cut.txt.zst", "--output-prefix", out, "--tokenizer-model", model}, "truncated"},
      {{"--input", *dir / "ok.txt", "--output-prefix", out, "--tokenizer-model", *dir / "ok.txt"},
       "cannot load tokenizer model"},
  };
  for (const auto& c : cases) {
    std::string msg = error_of(c.args);
    EXPECT_NE(msg.find(c.word), std::string::npos) << c.args[1] << ": " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  EXPECT_FALSE(fs::exists(out + ".idx")) << "a failed run left a dataset";
  EXPECT_FALSE(fs::exists(out + ".bin")) << "a failed run left a dataset";

  // CLI11 usage errors: a one-line occ::UsageError (main() prints it and exits 2).
  auto usage_error_of = [&](const std::vector<std::string>& args) -> std::string {
    StdoutCapture capture;
    try {
      run_preprocess(args);
    } catch (const occ::UsageError& e) {
      return e.what();
    }
    return "(no usage error)";
  };
  std::string err = usage_error_of({"--input", *dir / "ok.txt", "--output-prefix", out, "--bogus"});
  EXPECT_NE(err.find("--bogus"), std::string::npos) << err;
  EXPECT_EQ(err.find('\n'), std::string::npos) << err;
  EXPECT_NE(usage_error_of({"--output-prefix", out}).find("--input"), std::string::npos);
}
