#pragma once
// A GGUF file (core/gguf.h) for llama.cpp, and the tools built on it (Ollama,
// LM Studio), from a merged checkpoint: llama.cpp's architecture `llama`
// (RMSNorm, SwiGLU, RoPE on whole heads; any number of query groups, tied or
// untied output, biases or none) or `gpt2` (LayerNorm, GeLU, learned
// positions, biases, one k/v head per query head), with llama.cpp's tensor
// names and metadata, and the run's tokenizer embedded: SentencePiece as
// tokenizer.ggml.model `llama` (pieces, scores, token types, bos/eos/unk),
// GPT-2 BPE as `gpt2` (tokens, merges, pre-tokenizer `gpt-2`). The padded
// vocabulary rows are kept, as unused tokens "[PAD<id>]", so the file holds
// the trained model exactly. A model llama.cpp cannot represent is refused
// with a one-line error naming the field.
//
// RoPE: llama.cpp's `llama` rotates consecutive pairs (2i, 2i+1) of a head;
// we (and Hugging Face) rotate halves (i, i + D/2). q's rows (per query head)
// and k's (per k/v head) are permuted as Hugging Face's GGUF converter does:
// row h*D + 2i + s of the file is our row h*D + s*D/2 + i (s = 0, 1).
#include <cstdint>
#include <map>
#include <string>

#include "core/gguf.h"
#include "data/tokenizer.h"
#include "model/config.h"
#include "train/checkpoint_merge.h"

namespace occ::cmd {

struct GgufSummary {
  std::string architecture;  // "llama" | "gpt2"
  int64_t tensors = 0;
  int vocabulary = 0;        // tokens written (the padded vocabulary)
  int fallback_f16 = 0;      // q8_0 tensors whose rows are not a multiple of 32, written as f16
};

GgufSummary write_gguf(const std::string& path, const GptConfig& m, const std::map<std::string, MergedTensor>& full,
                       int64_t iteration, const TokenizerSpec& tokenizer, GgmlType type);

}  // namespace occ::cmd
