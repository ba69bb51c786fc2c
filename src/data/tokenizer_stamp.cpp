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
  return {{"tokenizer_type", tokenizer_type_name(spec.type)},
          {"tokenizer", tokenizer.describe()},
          {"vocab_size", tokenizer.vocab_size()},
          {"fingerprint", fmt::format("fnv1a64:{:016x}", hash_files(files))}};
}

void write_tokenizer_stamp(const std::string& prefix, const nlohmann::json& stamp) {
  const std::string path = tokenizer_stamp_path(prefix), tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << stamp.dump(1) << "\n";
    OCC_CHECK(out.good(), "cannot write {}; check that the folder is writable and has free space", tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  OCC_CHECK(!ec, "cannot rename {} to {}: {}", tmp, path, ec.message());
}

std::optional<nlohmann::json> read_tokenizer_stamp(const std::string& prefix) {
  const std::string path = tokenizer_stamp_path(prefix);
  std::ifstream in(path);
  if (!in.good()) return std::nullopt;
  nlohmann::json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    fail("{} is not valid JSON ({}); remove it or preprocess the dataset again", path, printable(e.what(), 120));
  }
  OCC_CHECK(j.is_object() && j.contains("fingerprint") && j["fingerprint"].is_string() && j.contains("vocab_size") &&
                j["vocab_size"].is_number_integer() && j.contains("tokenizer") && j["tokenizer"].is_string(),
            "{} is not a tokenizer stamp (fingerprint, vocab_size, tokenizer); remove it or preprocess the dataset "
            "again",
            path);
  return j;
}

}  // namespace occ
