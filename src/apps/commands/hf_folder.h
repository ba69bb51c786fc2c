#pragma once
// A Hugging Face model folder as import-hf reads it: its JSON files, its tensors
// (model.safetensors or the shards of model.safetensors.index.json; F32, F16 and
// BF16 widened exactly, every value finite) and its tokenizer files.
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/safetensors.h"
#include "data/tokenizer.h"
#include "train/checkpoint_merge.h"

namespace occ::cmd {

// A JSON object file of the folder (`what`: which one, for the message).
nlohmann::json read_hf_json(const std::string& path, const char* what);

// The folder's tensors by name, over one file or the shards of an index.
class HfWeights {
 public:
  explicit HfWeights(const std::string& dir);
  bool has(const std::string& name) const { return where_.count(name) != 0; }
  std::set<std::string> names() const {
    std::set<std::string> out;
    for (const auto& [name, file] : where_) out.insert(name);
    return out;
  }
  // A tensor's values as fp32 (F32 as they are; F16 and BF16 widened exactly), all finite.
  MergedTensor read(const std::string& name, const std::vector<int64_t>& want) const;
  mutable std::set<std::string> used_;  // the tensors read

 private:
  void open(const std::string& path);
  std::string dir_;
  std::map<std::string, SafetensorsReader> files_;
  std::map<std::string, std::string> where_;
};

// The folder's tokenizer (tokenizer.model: SentencePiece; vocab.json + merges.txt:
// GPT-2 BPE), its files where they are in the folder; refused, naming what is read, when none.
TokenizerSpec folder_tokenizer(const std::string& dir);
// The folder's tokenizer loaded; a damaged file is named as the folder's (no flag named it).
std::unique_ptr<Tokenizer> load_folder_tokenizer(const TokenizerSpec& spec, const std::string& dir);
// Copies the tokenizer's files into STAGING (a directory that becomes FINAL_DIR) and
// names them where they will be.
TokenizerSpec copy_tokenizer(const TokenizerSpec& from, const std::string& staging, const std::string& final_dir);

}  // namespace occ::cmd
