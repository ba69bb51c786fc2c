// Samples text from a checkpoint: temperature, top-k and top-p (nucleus) over
// the last position's logits. With the KV cache (default) the prompt runs once
// and every new token one position's forward (model/kv_decoder.h). The prompt and
// the new tokens fit the context (the run's seq-length), as Megatron's text
// generation refuses prompt + tokens_to_generate beyond its positions: a longer
// request is refused, naming the lengths. --sliding-window asks for the old
// behaviour instead: once the text fills the context the window slides, each new
// token then recomputing the window of the last seq-length tokens (a longer prompt
// keeps its last seq-length tokens).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>

#include "apps/commands/commands.h"
#include "apps/commands/train_flags.h"
#include "core/rng.h"
#include "core/safetensors.h"
#include "core/timer.h"
#include "data/tokenizer.h"
#include "model/gpt.h"
#include "model/kv_decoder.h"
#include "train/checkpoint.h"
#include "train/checkpoint_merge.h"
#include "train/output_paths.h"

namespace occ::cmd {

namespace {

std::vector<int32_t> parse_ids(const std::string& list, int vocab) {
  std::vector<int32_t> ids;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    OCC_CHECK(!item.empty() && end && *end == '\0' && v >= 0 && v < vocab,
              "--prompt-ids: '{}' is not a token id in [0, {}); pass comma-separated ids", item, vocab);
    ids.push_back(int32_t(v));
  }
  OCC_CHECK(!ids.empty(), "--prompt-ids is empty; pass comma-separated token ids");
  return ids;
}

}  // namespace

int generate(int argc, char** argv) {
  CLI::App app{"Sample text from a trained checkpoint", "generate"};
  std::string load, prompt, prompt_ids, logits_out;
  TokenizerSpec spec;
  int max_new_tokens = 100, top_k = 40;
  float temperature = 0.8f, top_p = 1.0f;
  uint64_t seed = 1234;
  bool kv_cache = true, print_ids = false, print_speed = false, sliding_window = false;
  app.add_option("--load", load, "checkpoint directory")->required();
  add_tokenizer_flags(app, spec);  // default: the tokenizer the checkpoint's run was trained with
  app.add_option("--prompt", prompt, "text to continue")->capture_default_str();
  app.add_option("--prompt-ids", prompt_ids, "the prompt as comma-separated token ids (instead of --prompt)");
  app.add_option("--max-new-tokens", max_new_tokens,
                 "new tokens to sample (default: 100, or as many as the context holds after the prompt); the prompt "
                 "and the new tokens must fit the context (the run's --seq-length)");
  app.add_flag("--sliding-window", sliding_window,
               "past the context, slide the window over the last seq-length tokens (a longer prompt keeps its last "
               "seq-length tokens; --logits-out then has a row per kept prompt position)");
  app.add_option("--temperature", temperature, "0 picks the most likely token")->capture_default_str();
  app.add_option("--top-k", top_k, "sample among the k most likely tokens (0: all)")->capture_default_str();
  app.add_option("--top-p", top_p, "then among the fewest most likely tokens whose probabilities sum to p (1: all)")
      ->capture_default_str();
  app.add_option("--seed", seed, "sampling seed")->capture_default_str();
  app.add_flag("--kv-cache,!--no-kv-cache", kv_cache,
               "keep each position's keys and values: one position's forward per new token (default on)");
  app.add_flag("--print-speed", print_speed, "print the new tokens' count, time and tokens/s on stderr");
  app.add_flag("--print-ids", print_ids, "also print the token ids (prompt and continuation) on a line 'ids: ...'");
  app.add_option("--logits-out", logits_out,
                 "write a safetensors file: prompt_logits [prompt, padded vocab] (every prompt position's), "
                 "step_logits [new tokens, padded vocab] (those each new token was chosen from), tokens");
  if (int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;
  OCC_CHECK(max_new_tokens >= 0, "--max-new-tokens must be >= 0");
  OCC_CHECK(temperature >= 0, "--temperature must be >= 0");
  OCC_CHECK(top_k >= 0, "--top-k must be >= 0");
  OCC_CHECK(top_p > 0 && top_p <= 1, "--top-p {} is outside (0, 1]", top_p);
  OCC_CHECK(prompt_ids.empty() || prompt.empty(), "pass --prompt or --prompt-ids, not both");

  if (!logits_out.empty()) {  // before the work: not over anything it reads
    const TokenizerSpec recorded = tokenizer_from_config(verify_checkpoint(load).config);
    OutputPaths outputs;
    outputs.file("--logits-out", logits_out);
    outputs.checkpoint_input("--load", load);
    outputs.tokenizer_inputs(spec, recorded, load);
    outputs.check();
  }
  // Any layout: the shards are merged into the single-process model.
  const MergedCheckpoint merged = merge_checkpoint(load);
  if (!spec.given()) {
    spec = tokenizer_from_config(merged.config);
    OCC_CHECK(spec.given(), "checkpoint {} does not name its tokenizer; pass --tokenizer-model (or --tokenizer-type "
                            "GPT2BPETokenizer with --vocab-file and --merge-file)", load);
  }
  const std::unique_ptr<Tokenizer> loaded = load_tokenizer(spec);
  const Tokenizer& tok = *loaded;
  GptConfig model = merged.model;
  OCC_CHECK(tok.vocab_size() == model.vocab_size,
            "tokenizer {} has {} tokens but the checkpoint's model was trained with {}; use the run's tokenizer",
            tok.describe(), tok.vocab_size(), model.vocab_size);
  model.hidden_dropout = model.attention_dropout = 0.0f;
  ParallelLayout layout;
  SelfCommunicator self;
  GptStage stage(model, layout, self, 0);
  for (const auto& t : stage.param_layout().tensors()) {
    const MergedTensor& m = merged.tensors.at(t.name);
    stage.params().copy_from_host(m.data.data(), m.data.size(), size_t(t.offset));
  }
  std::vector<int32_t> ids = prompt_ids.empty() ? tok.encode(prompt) : parse_ids(prompt_ids, model.vocab_size);
  if (ids.empty()) ids.push_back(tok.eod_id());
  const size_t prompt_len = ids.size();
  const int V = model.vocab_size, Vp = model.padded_vocab_size();
  const size_t S = size_t(model.seq_length);
  if (!sliding_window) {
    OCC_CHECK(prompt_len <= S,
              "the prompt is {} tokens, more than the {} positions of the checkpoint's context (its --seq-length); "
              "give a shorter prompt (or --sliding-window to keep its last {} tokens)", prompt_len, S, S);
    if (!app.count("--max-new-tokens")) max_new_tokens = int(std::min<size_t>(size_t(max_new_tokens), S - prompt_len));
    OCC_CHECK(prompt_len + size_t(max_new_tokens) <= S,
              "the prompt's {} tokens and --max-new-tokens {} need {} positions, more than the {} of the checkpoint's "
              "context (its --seq-length); pass --max-new-tokens {} or less, or a shorter prompt (or --sliding-window "
              "to slide past the context)", prompt_len, max_new_tokens, prompt_len + size_t(max_new_tokens), S,
              S - prompt_len);
  }
  KvCacheDecoder decoder(stage);
  // The next-token logits after ids: one cached position, or the window's full forward.
  auto window_logits = [&] {
    const size_t ctx = std::min(ids.size(), S);
    std::vector<float> all = decoder.prefill(std::vector<int32_t>(ids.end() - ptrdiff_t(ctx), ids.end()));
    return all;
  };
  std::vector<float> prompt_logits = window_logits();
  std::vector<float> logits(prompt_logits.end() - Vp, prompt_logits.end()), step_logits;
  if (!logits_out.empty() && prompt_len > S)
    prompt_logits.erase(prompt_logits.begin(), prompt_logits.end() - ptrdiff_t(S * size_t(Vp)));
  std::vector<float> probs(static_cast<size_t>(V));
  std::vector<int> order(static_cast<size_t>(V));
  const double start = now_seconds();
  int generated = 0;
  for (int step = 0; step < max_new_tokens; ++step) {
    if (!logits_out.empty()) step_logits.insert(step_logits.end(), logits.begin(), logits.end());
    const float* l = logits.data();  // padded entries never sampled
    int next = 0;
    if (temperature == 0.0f) {
      next = int(std::max_element(l, l + V) - l);
    } else {
      std::iota(order.begin(), order.end(), 0);
      const int k = top_k > 0 ? std::min(top_k, V) : V;
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) { return l[a] > l[b]; });
      double sum = 0.0;
      for (int i = 0; i < k; ++i) sum += probs[size_t(i)] = std::exp((l[order[i]] - l[order[0]]) / temperature);
      // Nucleus: the fewest of them whose probability reaches top_p.
      int kept = k;
      if (top_p < 1.0f) {
        double acc = 0.0;
        for (int i = 0; i < k; ++i)
          if ((acc += probs[size_t(i)]) >= double(top_p) * sum) {
            kept = i + 1;
            break;
          }
        sum = acc;
      }
      double u = double(uniform_at(make_key(seed, 0x6E4ull), 0, uint64_t(step))) * sum;
      next = order[size_t(kept) - 1];
      for (int i = 0; i < kept; ++i)
        if ((u -= probs[size_t(i)]) <= 0) {
          next = order[size_t(i)];
          break;
        }
    }
    if (next == tok.eod_id()) break;
    ids.push_back(next);
    ++generated;
    if (step + 1 == max_new_tokens) break;
    if (kv_cache && decoder.length() < decoder.capacity()) {
      logits = decoder.step(next);
    } else {
      const std::vector<float> all = window_logits();
      logits.assign(all.end() - Vp, all.end());
    }
  }
  const double seconds = now_seconds() - start;
  std::printf("%s\n", tok.decode(ids).c_str());
  if (print_ids) {
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i) line += (i ? "," : "") + std::to_string(ids[i]);
    std::printf("ids: %s\n", line.c_str());
  }
  std::fflush(stdout);
  if (print_speed)
    std::fprintf(stderr, "generate: %d new tokens in %.3f s (%.1f tokens/s, %s)\n", generated, seconds,
               seconds > 0 ? generated / seconds : 0.0, kv_cache ? "KV cache" : "no KV cache");
  if (!logits_out.empty()) {
    SafetensorsWriter w;
    const int64_t rows = int64_t(prompt_logits.size()) / Vp;
    w.add_f32("prompt_logits", prompt_logits.data(), {rows, Vp});
    w.add_f32("step_logits", step_logits.data(), {int64_t(step_logits.size()) / Vp, Vp});
    w.add_i32("tokens", ids.data(), {int64_t(ids.size())});
    w.write(logits_out);
  }
  return 0;
}

}  // namespace occ::cmd
