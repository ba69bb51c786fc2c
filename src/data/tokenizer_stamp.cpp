#include "data/tokenizer_stamp.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "core/error.h"

namespace occ {
namespace {

// FNV-1a over the bytes of each file in turn (a file's name does not count).
uint64_t hash_files(const std::vector<std::string>& paths) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& path : paths) {
    std::ifstream in(path, std::ios::binary);
    OCC_CHECK(in.good(), "cannot read tokenizer file {}; check the path", path);
    for (std::istreambuf_iterator<char> it(in), end; it != end; ++it) h = (h ^ uint8_t(*it)) * 1099511628211ull;
  }
  return h;
}

}  // namespace

std::string tokenizer_stamp_path(const std::string& prefix) { return prefix + ".tokenizer.json"; }

nlohmann::json make_tokenizer_stamp(const Tokenizer& tokenizer, const TokenizerSpec& spec) {
  const std::vector<std::string> files = spec.type == TokenizerType::Gpt2Bpe
                                             ? std::vector<std::string>{spec.vocab_file, spec.merge_file}
                                             : std::vector<std::string>{spec.model};
  nlohmann::json stamp = {{"tokenizer_type", tokenizer_type_name(spec.type)},
                          {"tokenizer", tokenizer.describe()},
                          {"vocab_size", tokenizer.vocab_size()},
                          {"fingerprint", fmt::format("fnv1a64:{:016x}", hash_files(files))}};
  // The files, as given (for the command that makes the dataset again: regenerate_command).
  if (spec.type == TokenizerType::Gpt2Bpe) {
    stamp["vocab_file"] = spec.vocab_file;
    stamp["merge_file"] = spec.merge_file;
  } else {
    stamp["tokenizer_model"] = spec.model;
  }
  return stamp;
}

std::string regenerate_command(const std::string& prefix) {
  std::string tokenizer = "with the tokenizer it was made with (--tokenizer-model FILE, or --tokenizer-type "
                          "GPT2BPETokenizer --vocab-file FILE --merge-file FILE)";
  try {
    if (const auto stamp = read_tokenizer_stamp(prefix)) {
      auto text = [&](const char* key) { return stamp->value(key, std::string()); };
      if (!text("tokenizer_model").empty())
        tokenizer = "--tokenizer-model " + text("tokenizer_model");
      else if (!text("vocab_file").empty() && !text("merge_file").empty())
        tokenizer = fmt::format("--tokenizer-type GPT2BPETokenizer --vocab-file {} --merge-file {}", text("vocab_file"),
                                text("merge_file"));
    }
  } catch (const Error&) {  // a damaged stamp: the generic advice
  }
  return fmt::format("make it again from its corpus: optimus-cc preprocess --input CORPUS --output-prefix {} {}",
                     prefix, tokenizer);
}

void write_tokenizer_stamp(const std::string& prefix, const nlohmann::json& stamp) {
  const std::string path = tokenizer_stamp_path(prefix), tmp = path + ".tmp";
  std::error_code ec;
  try {
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << stamp.dump(1) << "\n";
      out.flush();
      OCC_CHECK(out.good(), "cannot write {}; check that the folder is writable and has free space", tmp);
    }
    std::filesystem::rename(tmp, path, ec);
    OCC_CHECK(!ec, "cannot rename {} to {}: {}", tmp, path, ec.message());
  } catch (...) {
    std::filesystem::remove(tmp, ec);  // never a stray temporary
    throw;
  }
}

std::optional<nlohmann::json> read_tokenizer_stamp(const std::string& prefix) {
  const std::string path = tokenizer_stamp_path(prefix);
  std::ifstream in(path);
  if (!in.good()) return std::nullopt;
  nlohmann::json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    fail("{} is not valid JSON ({}); remove it (it only records which tokenizer made {}), or make the dataset again",
         path, printable(e.what(), 120), prefix);
  }
  OCC_CHECK(j.is_object() && j.contains("fingerprint") && j["fingerprint"].is_string() && j.contains("vocab_size") &&
                j["vocab_size"].is_number_integer() && j.contains("tokenizer") && j["tokenizer"].is_string(),
            "{} is not a tokenizer stamp (fingerprint, vocab_size, tokenizer); remove it or preprocess the dataset "
            "again",
            path);
  return j;
}

}  // namespace occ
