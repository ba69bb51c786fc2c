// Samples text from a checkpoint: temperature and top-k over the last
// position's logits, the context window sliding once it reaches seq-length.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "apps/commands/commands.h"
#include "apps/commands/train_flags.h"
#include "core/rng.h"
#include "data/tokenizer.h"
#include "model/gpt.h"
#include "train/checkpoint_merge.h"

namespace occ::cmd {


int generate(int argc, char** argv) {
  CLI::App app{"Sample text from a trained checkpoint", "generate"};
  std::string load, prompt;
  TokenizerSpec spec;
  int max_new_tokens = 100, top_k = 40;
  float temperature = 0.8f;
  uint64_t seed = 1234;
  app.add_option("--load", load, "checkpoint directory")->required();
  add_tokenizer_flags(app, spec);  // default: the tokenizer the checkpoint's run was trained with
  app.add_option("--prompt", prompt, "text to continue")->capture_default_str();
  app.add_option("--max-new-tokens", max_new_tokens)->capture_default_str();
  app.add_option("--temperature", temperature, "0 picks the most likely token")->capture_default_str();
  app.add_option("--top-k", top_k, "sample among the k most likely tokens (0: all)")->capture_default_str();
  app.add_option("--seed", seed, "sampling seed")->capture_default_str();
  if (int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;
  OCC_CHECK(max_new_tokens >= 0, "--max-new-tokens must be >= 0");
  OCC_CHECK(temperature >= 0, "--temperature must be >= 0");
  OCC_CHECK(top_k >= 0, "--top-k must be >= 0");

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
  std::vector<int32_t> ids = tok.encode(prompt);
  if (ids.empty()) ids.push_back(tok.eod_id());
  const int V = model.vocab_size, Vp = model.padded_vocab_size();
  StageActivations acts = stage.make_activations();
  std::vector<float> probs(static_cast<size_t>(V));
  std::vector<int> order(static_cast<size_t>(V));
  for (int step = 0; step < max_new_tokens; ++step) {
    const size_t ctx = std::min(ids.size(), size_t(model.seq_length));
    std::vector<int32_t> window(ids.end() - ptrdiff_t(ctx), ids.end());
    MicroBatch mb{window.data(), nullptr, 1, int(ctx), 0, 0, 0.0f};
    mb.keep_logits = true;
    stage.forward(acts, mb, nullptr, nullptr, false);
    const std::vector<float> all_logits = stage.logits_to_host(acts);
    const float* logits = all_logits.data() + (ctx - 1) * size_t(Vp);  // padded entries never sampled
    int next = 0;
    if (temperature == 0.0f) {
      next = int(std::max_element(logits, logits + V) - logits);
    } else {
      std::iota(order.begin(), order.end(), 0);
      const int k = top_k > 0 ? std::min(top_k, V) : V;
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int a, int b) { return logits[a] > logits[b]; });
      double sum = 0.0;
      for (int i = 0; i < k; ++i) sum += probs[size_t(i)] = std::exp((logits[order[i]] - logits[order[0]]) / temperature);
      double u = double(uniform_at(make_key(seed, 0x6E4ull), 0, uint64_t(step))) * sum;
      next = order[size_t(k) - 1];
      for (int i = 0; i < k; ++i)
        if ((u -= probs[size_t(i)]) <= 0) {
          next = order[size_t(i)];
          break;
        }
    }
    if (next == tok.eod_id()) break;
    ids.push_back(next);
  }
  std::printf("%s\n", tok.decode(ids).c_str());
  return 0;
}

}  // namespace occ::cmd
