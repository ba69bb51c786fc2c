#pragma once
// Which tokenizer made a dataset: `preprocess` writes PREFIX.tokenizer.json next to
// PREFIX.bin / PREFIX.idx, so that a blend of datasets made with different
// tokenizers is refused (the token ids would mean different words) rather than
// trained on. Megatron's own files have no stamp; their token dtype is then all
// that tells vocabularies apart.
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "data/tokenizer.h"

namespace occ {

// {"tokenizer_type", "tokenizer" (describe()), "vocab_size", "fingerprint", and the
// files: "tokenizer_model" or "vocab_file" and "merge_file"}: the fingerprint hashes
// the tokenizer's files' bytes, so copies of one model agree.
nlohmann::json make_tokenizer_stamp(const Tokenizer& tokenizer, const TokenizerSpec& spec);
// Written atomically (a temporary file renamed); throws a one-line occ::Error.
void write_tokenizer_stamp(const std::string& prefix, const nlohmann::json& stamp);
// The stamp of the dataset at `prefix`, if it has one; a malformed one is an error.
std::optional<nlohmann::json> read_tokenizer_stamp(const std::string& prefix);
std::string tokenizer_stamp_path(const std::string& prefix);
// The command that makes the dataset at `prefix` again, with the tokenizer its stamp
// names: "make it again from its corpus: optimus-cc preprocess --input CORPUS
// --output-prefix PREFIX --tokenizer-model FILE" (the tokenizer left to the user
// where there is no stamp). For messages about a damaged dataset.
std::string regenerate_command(const std::string& prefix);

}  // namespace occ
