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
#include "train/checkpoint.h"

namespace occ::cmd {

namespace {
TrainOptions options_from_checkpoint(const nlohmann::json& c) {
  TrainOptions o;
  o.model.num_layers = c.at("num_layers");
  o.model.hidden_size = c.at("hidden_size");
  o.model.num_attention_heads = c.at("num_attention_heads");
  o.model.seq_length = c.at("seq_length");
  o.model.max_position_embeddings = c.at("max_position_embeddings");
  o.model.vocab_size = c.at("vocab_size");
  o.tensor_parallel = c.at("tensor_model_parallel_size");
  o.pipeline_parallel = c.at("pipeline_model_parallel_size");
  o.seed = c.at("seed");
  return o;
}
}  // namespace

int generate(int argc, char** argv) {
  CLI::App app{"Sample text from a trained checkpoint", "generate"};
  std::string load, tokenizer_model, prompt;
  int max_new_tokens = 100, top_k = 40;
  float temperature = 0.8f;
  uint64_t seed = 1234;
  app.add_option("--load", load, "checkpoint directory")->required();
  app.add_option("--tokenizer-model", tokenizer_model, "SentencePiece model the run was trained with")->required();
  app.add_option("--prompt", prompt, "text to continue")->capture_default_str();
  app.add_option("--max-new-tokens", max_new_tokens)->capture_default_str();
  app.add_option("--temperature", temperature, "0 picks the most likely token")->capture_default_str();
  app.add_option("--top-k", top_k, "sample among the k most likely tokens (0: all)")->capture_default_str();
  app.add_option("--seed", seed, "sampling seed")->capture_default_str();
  if (int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;
  OCC_CHECK(max_new_tokens >= 0, "--max-new-tokens must be >= 0");
  OCC_CHECK(temperature >= 0, "--temperature must be >= 0");
  OCC_CHECK(top_k >= 0, "--top-k must be >= 0");

  Tokenizer tok = Tokenizer::load(tokenizer_model);
  TrainOptions opt = options_from_checkpoint(read_checkpoint_config(load));
  OCC_CHECK(opt.tensor_parallel == 1 && opt.pipeline_parallel == 1,
            "generate reads single-process checkpoints; this one was saved with tensor {} x pipeline {} parallelism",
            opt.tensor_parallel, opt.pipeline_parallel);
  OCC_CHECK(tok.vocab_size() == opt.model.vocab_size,
            "tokenizer {} has {} tokens but the checkpoint's model was trained with {}; use the run's tokenizer",
            tokenizer_model, tok.vocab_size(), opt.model.vocab_size);
  opt.model.hidden_dropout = opt.model.attention_dropout = 0.0f;
  ParallelLayout layout;
  SelfCommunicator self;
  GptStage stage(opt.model, layout, self, opt.seed);
  load_checkpoint(load, opt, layout, stage, nullptr);

  std::vector<int32_t> ids = tok.encode(prompt);
  if (ids.empty()) ids.push_back(tok.eod_id());
  const int V = opt.model.vocab_size, Vp = opt.model.padded_vocab_size();
  StageActivations acts;
  std::vector<float> probs(static_cast<size_t>(V));
  std::vector<int> order(static_cast<size_t>(V));
  for (int step = 0; step < max_new_tokens; ++step) {
    const size_t ctx = std::min(ids.size(), size_t(opt.model.seq_length));
    std::vector<int32_t> window(ids.end() - ptrdiff_t(ctx), ids.end());
    MicroBatch mb{window.data(), nullptr, 1, int(ctx), 0, 0, 0.0f};
    stage.forward(acts, mb, nullptr, nullptr, false);
    const float* logits = stage.logits(acts) + (ctx - 1) * size_t(Vp);  // padded entries never sampled
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
