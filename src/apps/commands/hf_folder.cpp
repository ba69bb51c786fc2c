#include "apps/commands/hf_folder.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/ranges.h>

#include "core/precision.h"
#include "core/tensor_file.h"

namespace occ::cmd {

namespace fs = std::filesystem;
using json = nlohmann::json;

json read_hf_json(const std::string& path, const char* what) {
  std::ifstream in(path);
  OCC_CHECK(in.good(), "import-hf: cannot read {} ({}); --input must be a Hugging Face model folder", path, what);
  json j = json::parse(in, nullptr, false);
  OCC_CHECK(j.is_object(), "import-hf: {} is not a JSON object; the folder is damaged", path);
  return j;
}

HfWeights::HfWeights(const std::string& dir) : dir_(dir) {
  const std::string single = dir + "/model.safetensors", index = dir + "/model.safetensors.index.json";
  if (fs::exists(single)) {
    open(single);
    for (const auto& name : files_.at(single).names()) where_[name] = single;
  } else {
    OCC_CHECK(fs::exists(index), "import-hf: {} has neither model.safetensors nor model.safetensors.index.json "
                                 "(PyTorch .bin weights: save them as safetensors first)", dir);
    const json map = read_hf_json(index, "the shard index").value("weight_map", json());
    OCC_CHECK(map.is_object() && !map.empty(), "import-hf: {} has no weight_map", index);
    for (const auto& [name, file] : map.items()) {
      OCC_CHECK(file.is_string() && file.get<std::string>().find('/') == std::string::npos,
                "import-hf: {}: tensor {} maps to {}, not a file of the folder", index, name, file.dump());
      const std::string path = dir + "/" + file.get<std::string>();
      open(path);
      OCC_CHECK(files_.at(path).has(name), "import-hf: {} names {} for tensor {}, which it does not hold", index,
                path, name);
      where_[name] = path;
    }
  }
}

MergedTensor HfWeights::read(const std::string& name, const std::vector<int64_t>& want) const {
  auto it = where_.find(name);
  OCC_CHECK(it != where_.end(), "import-hf: {} has no tensor {}; the weights do not match config.json", dir_, name);
  const SafetensorsReader& f = files_.at(it->second);
  MergedTensor t{f.shape(name), {}};
  OCC_CHECK(t.shape == want, "import-hf: tensor {} has shape [{}] but config.json implies [{}]", name,
            fmt::join(t.shape, ", "), fmt::join(want, ", "));
  const std::string& dtype = f.dtype(name);
  if (dtype == "F32") {
    t.data = f.read_f32(name);
  } else {
    OCC_CHECK(dtype == "F16" || dtype == "BF16", "import-hf: tensor {} is {}; F32, F16 and BF16 are read", name,
              dtype);
    const std::vector<char> raw = f.read_bytes(name);
    t.data.resize(raw.size() / 2);
    for (size_t i = 0; i < t.data.size(); ++i) {
      uint16_t b;
      std::memcpy(&b, raw.data() + 2 * i, 2);
      t.data[i] = dtype == "F16" ? fp16_value(b) : bf16_value(b);
    }
  }
  // A NaN or infinity would train (and generate) nothing but non-finite values.
  for (size_t i = 0; i < t.data.size(); ++i)
    OCC_CHECK(std::isfinite(t.data[i]),
              "import-hf: tensor {} of {} holds {} at element {} (weights must be finite numbers); the folder's "
              "weights are damaged: download or save the model again", name, it->second, t.data[i], i);
  used_.insert(name);
  return t;
}

void HfWeights::open(const std::string& path) {
  if (!files_.count(path))
    files_.emplace(path, SafetensorsReader::open(path, "the folder's weights are damaged: download or save the model "
                                                       "again"));
}

// The folder's tokenizer (tokenizer.model: SentencePiece; vocab.json + merges.txt:
// GPT-2 BPE), its files where they are in the folder.
TokenizerSpec folder_tokenizer(const std::string& dir) {
  TokenizerSpec spec;
  if (fs::exists(dir + "/tokenizer.model")) {
    spec.model = dir + "/tokenizer.model";
  } else if (fs::exists(dir + "/vocab.json") && fs::exists(dir + "/merges.txt")) {
    spec.type = TokenizerType::Gpt2Bpe;
    spec.vocab_file = dir + "/vocab.json";
    spec.merge_file = dir + "/merges.txt";
  } else {
    fail("import-hf: {} has no tokenizer optimus-cc reads (tokenizer.model: SentencePiece; vocab.json + merges.txt: "
         "GPT-2 BPE{}); pass --tokenizer-model (or --tokenizer-type GPT2BPETokenizer with --vocab-file and "
         "--merge-file)", dir, fs::exists(dir + "/tokenizer.json") ? "; a tokenizer.json alone is not read" : "");
  }
  return spec;
}

// The folder's tokenizer loaded; a damaged file is named as the folder's (no flag named it).
std::unique_ptr<Tokenizer> load_folder_tokenizer(const TokenizerSpec& spec, const std::string& dir) {
  try {
    return load_tokenizer(spec);
  } catch (const Error& e) {
    std::string why = e.what();
    if (const size_t flag_advice = why.rfind("; check --"); flag_advice != std::string::npos) why.resize(flag_advice);
    fail("import-hf: the tokenizer of {} does not load ({}); the folder's tokenizer files are damaged: download them "
         "again, or pass --tokenizer-model FILE (or the GPT-2 BPE files)", dir, why);
  }
}

// Copies the tokenizer's files into STAGING (a directory that becomes CKPT/tokenizer)
// and names them where they will be (FINAL).
TokenizerSpec copy_tokenizer(const TokenizerSpec& from, const std::string& staging, const std::string& final_dir) {
  TokenizerSpec spec = from;
  auto copy = [&](std::string& path) {
    const std::string name = fs::path(path).filename().string();
    std::ifstream in(path, std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    OCC_CHECK(in.good() || in.eof(), "import-hf: cannot read tokenizer file {}; check the folder", path);
    fs::create_directories(staging);
    write_file_atomic(staging + "/" + name, bytes.str());
    path = fs::absolute(final_dir + "/" + name).string();
  };
  for (std::string* path : {&spec.model, &spec.vocab_file, &spec.merge_file})
    if (!path->empty()) copy(*path);
  return spec;
}

}  // namespace occ::cmd
