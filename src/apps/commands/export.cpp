// Merges a (possibly TP x PP sharded) checkpoint into one safetensors file of
// the full model under the single-process parameter names, and optionally a
// Hugging Face GPT-2 or Llama directory (hf_export.h).
//
// Every shard is read with the ParamLayout of its (tp_rank, pp_rank) in the
// saved layout, so the slicing is exactly the one training used. Consistency
// is checked while merging: a tensor that TP does not split must be
// bit-identical on every TP rank of its stage, and the last stage's copy of
// the tied word embedding ("lm_head.word_embeddings.weight", PP > 1) must be
// bit-identical to the first stage's embedding; the copy is not exported.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "apps/commands/commands.h"
#include "apps/commands/gguf_export.h"
#include "apps/commands/hf_export.h"
#include "apps/commands/train_flags.h"
#include "core/safetensors.h"
#include "core/tensor_file.h"
#include "model/params.h"
#include "train/checkpoint.h"
#include "train/checkpoint_merge.h"
#include "train/output_paths.h"

namespace occ::cmd {

namespace {

namespace fs = std::filesystem;

// OUT: the full model under the single-process names, read back and verified bit for bit.
void write_single(const std::string& out, const ParamLayout& single, const MergedCheckpoint& merged) {
  const auto& full = merged.tensors;
  SafetensorsWriter w;
  for (const auto& t : single.tensors()) {
    auto it = full.find(t.name);
    OCC_CHECK(it != full.end() && it->second.shape == t.full_shape, "internal: merged model lacks {}", t.name);
    w.add_f32(t.name, it->second.data.data(), t.full_shape);
  }
  w.set_metadata("format", "optimus-cc model");
  w.set_metadata("iteration", std::to_string(merged.iteration));
  w.set_metadata("config", merged.config.dump());
  w.write(out);
  const SafetensorsReader written = SafetensorsReader::open(out);
  for (const auto& t : single.tensors()) {
    const std::vector<float>& want = full.at(t.name).data;
    const std::vector<float> got = written.has(t.name) ? written.read_f32(t.name) : std::vector<float>{};
    OCC_CHECK(got.size() == want.size() && std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0,
              "{} does not read back as written (tensor {}); check the disk and export again", out, t.name);
  }
  std::printf("full model -> %s (read back and verified)\n", out.c_str());
}

}  // namespace

int export_checkpoint(int argc, char** argv) {
  CLI::App app{"Merge a sharded checkpoint into one safetensors file of the full model (single-process names); "
               "optionally also a Hugging Face GPT-2 or Llama directory",
               "export"};
  std::string load, out, hf_dir, hf_llama_dir, gguf, gguf_type = "f32";
  int64_t iteration = -1;
  app.add_option("--load", load, "checkpoint directory (as given to train --save)")->required();
  app.add_option("--out", out, "output .safetensors file of the full model (single-process names)");
  app.add_option("--iteration", iteration, "iteration to export (default: the latest committed one)");
  app.add_option("--hf-gpt2", hf_dir,
                 "also write DIR/model.safetensors + DIR/config.json in Hugging Face GPT-2 form (and, for a GPT-2 BPE "
                 "run, the tokenizer: vocab.json, merges.txt, tokenizer_config.json)");
  app.add_option("--hf-llama", hf_llama_dir,
                 "also write DIR/model.safetensors + DIR/config.json in Hugging Face LlamaForCausalLM form (a model "
                 "trained with --normalization RMSNorm --swiglu --position-embedding-type rope; GQA, untied "
                 "embeddings and --disable-bias-linear as trained); the tokenizer as for --hf-gpt2");
  app.add_option("--gguf", gguf,
                 "also write a GGUF file for llama.cpp / Ollama / LM Studio (architecture 'llama' for RMSNorm + "
                 "SwiGLU + RoPE models, 'gpt2' for GPT-2 ones), the run's tokenizer embedded");
  app.add_option("--gguf-type", gguf_type, "storage of the GGUF's matrices: f32, f16, bf16 or q8_0 (norms and "
                 "biases stay f32)")->capture_default_str();
  TokenizerSpec tokenizer_flags;
  add_tokenizer_flags(app, tokenizer_flags);  // default: the files the run was trained with
  if (int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;
  OCC_CHECK(!out.empty() || !hf_dir.empty() || !hf_llama_dir.empty() || !gguf.empty(),
            "export writes nothing: pass --out FILE.safetensors, --hf-gpt2 DIR, --hf-llama DIR or --gguf FILE");
  OCC_CHECK(!app.count("--iteration") || iteration >= 0,
            "--iteration must be >= 0 (got {}); leave it out to export the latest committed iteration", iteration);
  const GgmlType gguf_storage = parse_ggml_type(gguf_type);
  // Every target is checked before anything is written, against the others and
  // against every file the export reads (the checkpoint's files, whichever iteration,
  // and the tokenizer), and a failure removes what this export created: nothing
  // partial is left, nothing read is overwritten.
  const SavedCheckpoint saved = verify_checkpoint(load, iteration);  // headers only: the config, the tokenizer
  const TokenizerSpec recorded = tokenizer_from_config(saved.config);
  const TokenizerSpec tokenizer = tokenizer_flags.given() ? tokenizer_flags : recorded;
  OutputPaths targets;
  if (!out.empty()) targets.file("--out", out);
  if (!gguf.empty()) targets.file("--gguf", gguf);
  for (const auto& [flag, dir] : {std::pair{"--hf-gpt2", hf_dir}, std::pair{"--hf-llama", hf_llama_dir}}) {
    if (dir.empty()) continue;
    targets.dir(flag, dir);
    for (const std::string& name : hf_file_names(tokenizer)) targets.inside(flag, (fs::path(dir) / name).string());
  }
  targets.checkpoint_input("--load", load);
  targets.tokenizer_inputs(tokenizer_flags, recorded, load);
  std::vector<fs::path> created;
  std::error_code ec;
  for (const std::string& target : {out, gguf, hf_dir, hf_llama_dir})
    if (!target.empty() && !fs::exists(target, ec)) created.push_back(target);
  try {
    targets.check();
    const MergedCheckpoint merged = merge_checkpoint(load, iteration);
    const GptConfig& model = merged.model;
    const auto& full = merged.tensors;
    const int T = merged.tensor_parallel, P = merged.pipeline_parallel;
    const double head_diff = merged.head_copy_diff;
    iteration = merged.iteration;
    // Output in the single-process layout's order and names.
    const ParamLayout single(model, ParallelLayout{});
    OCC_CHECK(full.size() == single.tensors().size(), "internal: merged {} tensors, the full model has {}", full.size(),
              single.tensors().size());
    int64_t total = 0;
    for (const auto& [name, t] : full) total += int64_t(t.data.size());
    // Each Hugging Face target holds this model (and tokenizer), before any file is written.
    if (!hf_dir.empty()) check_hf_gpt2(model, tokenizer);
    if (!hf_llama_dir.empty()) check_hf_llama(model, tokenizer);
    if (!out.empty()) write_single(out, single, merged);
    std::printf("merged iteration %lld of %s (tensor %d x pipeline %d shards): %zu tensors, %lld parameters\n",
                (long long)iteration, load.c_str(), T, P, full.size(), (long long)total);
    if (T > 1) std::printf("replicated tensors bit-identical across the %d tensor-parallel ranks\n", T);
    if (head_diff >= 0)
      std::printf("last stage's LM-head copy of the word embedding bit-identical (max |diff| %g)\n", head_diff);
    if (!gguf.empty()) {
      const GgufSummary s = write_gguf(gguf, model, full, iteration, tokenizer, gguf_storage);
      std::printf("GGUF for llama.cpp -> %s (architecture %s, %lld tensors, matrices %s, vocabulary %d with the "
                  "tokenizer embedded%s)\n",
                  gguf.c_str(), s.architecture.c_str(), (long long)s.tensors, ggml_type_name(gguf_storage),
                  s.vocabulary,
                  s.fallback_f16
                      ? fmt::format("; {} matrices with rows not a multiple of 32 as f16", s.fallback_f16).c_str()
                      : "");
    }

    if (!hf_llama_dir.empty()) {
      write_hf_llama(hf_llama_dir, model, full, iteration, tokenizer);
      std::printf("Hugging Face Llama model -> %s/model.safetensors + config.json (%s; vocab_size %d = padded "
                  "vocabulary of the %d-token tokenizer)\n",
                  hf_llama_dir.c_str(), model.describe_architecture().c_str(), model.padded_vocab_size(),
                  model.vocab_size);
    }
    if (!hf_dir.empty()) {
      write_hf_gpt2(hf_dir, model, full, iteration, tokenizer);
      std::printf("Hugging Face GPT-2 model -> %s/model.safetensors + config.json (vocab_size %d = padded vocabulary "
                  "of the %d-token tokenizer)\n",
                  hf_dir.c_str(), model.padded_vocab_size(), model.vocab_size);
    }
  } catch (...) {
    for (const fs::path& p : created) fs::remove_all(p, ec);
    throw;
  }
  return 0;
}

}  // namespace occ::cmd
