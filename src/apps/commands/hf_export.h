#pragma once
// Hugging Face directories from a merged checkpoint (train/checkpoint_merge.h):
// model.safetensors + config.json of GPT2LMHeadModel or LlamaForCausalLM, the
// run's tokenizer (GPT-2 BPE: vocab.json + merges.txt; SentencePiece:
// tokenizer.model) with tokenizer_config.json for AutoTokenizer, and
// generation_config.json with its bos/eos ids. Each refuses, with a one-line
// error naming the field, a model whose architecture the target cannot hold.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "model/config.h"
#include "train/checkpoint_merge.h"

namespace occ::cmd {

// Whether the target holds the model (and the run's tokenizer loads, of its
// vocabulary): checked by the writers, and by export before it writes anything.
void check_hf_gpt2(const GptConfig& m, const TokenizerSpec& tokenizer);
void check_hf_llama(const GptConfig& m, const TokenizerSpec& tokenizer);

// The names of the files either writer writes into its directory for this tokenizer
// (model.safetensors, config.json, and the tokenizer's files when it names one).
std::vector<std::string> hf_file_names(const TokenizerSpec& tokenizer);

// GPT-2: LayerNorm, GeLU MLP, learned positions, tied embeddings, biases, one k/v head per query head.
void write_hf_gpt2(const std::string& dir, const GptConfig& m, const std::map<std::string, MergedTensor>& full,
                   int64_t iteration, const TokenizerSpec& tokenizer);

// Llama: RMSNorm, SwiGLU, RoPE on every dimension of a head (--rotary-percent 1);
// any number of query groups, tied or untied embeddings, biases or none
// (attention_bias = mlp_bias = the run's linear biases).
//
// RoPE convention: ours is rotate-half (feature i of a head pairs with
// i + head_dim/2), which is Hugging Face's Llama's (apply_rotary_pos_emb with
// rotate_half), so q_proj and k_proj are our q and k rows as they are, with no
// permutation. (Meta's original Llama checkpoints pair (2i, 2i+1), "interleaved";
// Hugging Face's conversion permutes each head's q/k rows from that order into
// rotate-half, which is the permutation a Meta-format export would need.)
// Layout: our fused QKV rows per query group g are [q of its heads | k | v] (D
// rows each); q_proj row h*D + d is our row (g (r + 2) + h % r) D + d with
// r = heads / groups and g = h / r; k_proj row g*D + d is (g (r + 2) + r) D + d,
// v_proj's the next D. gate_proj and up_proj are the two halves of our packed
// dense_h_to_4h ([gate; up]); down_proj is dense_4h_to_h.
void write_hf_llama(const std::string& dir, const GptConfig& m, const std::map<std::string, MergedTensor>& full,
                    int64_t iteration, const TokenizerSpec& tokenizer);

}  // namespace occ::cmd
