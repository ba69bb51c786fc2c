// optimus-cc samples: what a run reads, sample by sample. Takes train's data and
// schedule flags (the same command line, so the same indices) and prints one line
// per sample of a set, in the order training reads them: "<position> <id> <id> ...",
// the seq_length + 1 token ids of sample <position> (training's global batch b
// reads positions [b x global batch, (b + 1) x global batch); an evaluation reads
// eval_iters global batches on from where the previous one stopped). --text
// prints the decoded text instead, as a JSON string.
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/commands/commands.h"
#include "apps/commands/train_flags.h"
#include "core/error.h"
#include "data/tokenizer.h"
#include "data/training_data.h"
#include "train/options.h"

namespace occ::cmd {

int samples(int argc, char** argv) {
  CLI::App app{"Print the samples a training run reads: one line per sample, '<position> <token id> ...' "
               "(seq_length + 1 ids), in training's order. Give train's data and schedule flags.",
               "samples"};
  TrainOptions opt;
  add_train_flags(app, opt);
  app.add_option("--vocab-size", opt.model.vocab_size, "vocabulary size when no --tokenizer-model is given");
  std::string split_name = "train";
  int64_t start = 0, first = 10;
  bool text = false;
  app.add_option("--split-name", split_name, "the set: train, valid or test")
      ->check(CLI::IsMember({"train", "valid", "test"}))
      ->capture_default_str();
  app.add_option("--start", start, "the first position printed")->capture_default_str();
  app.add_option("--first", first, "how many samples to print")->capture_default_str();
  app.add_flag("--text", text, "print each sample's text (decoded by the tokenizer) as a JSON string instead of ids");
  if (int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;
  refuse_inapplicable_flags(app, opt);
  OCC_CHECK(start >= 0 && first >= 0, "--start and --first must be >= 0 (got {} and {})", start, first);

  opt.tokenizer.validate();
  std::unique_ptr<Tokenizer> tokenizer;
  if (opt.tokenizer.given()) {
    tokenizer = load_tokenizer(opt.tokenizer);
    opt.model.vocab_size = tokenizer->vocab_size();
  }
  OCC_CHECK(opt.model.vocab_size > 0,
            "--tokenizer-model (or --tokenizer-type GPT2BPETokenizer with --vocab-file and --merge-file, or "
            "--vocab-size) is required to check the token ids");
  OCC_CHECK(!text || tokenizer, "--text decodes with the tokenizer: give --tokenizer-model (or the GPT-2 files)");
  OCC_CHECK(opt.global_batch_size >= 1, "--global-batch-size must be >= 1 (got {})", opt.global_batch_size);
  opt.resolve_train_samples();
  OCC_CHECK(opt.train_iters >= 1, "--train-iters must be >= 1 (got {})", opt.train_iters);
  OCC_CHECK(opt.eval_interval >= 0 && opt.eval_iters >= 0, "--eval-interval and --eval-iters must be >= 0");

  TrainingData data(opt.data_spec());
  for (const auto& line : data.notes()) std::fprintf(stderr, "notice: %s\n", line.c_str());
  for (const auto& line : data.build_missing_indices()) std::fprintf(stderr, "%s\n", line.c_str());
  data.open();
  const SampleSource* set = split_name == "train" ? &data.train() : split_name == "valid" ? data.valid() : data.test();
  OCC_CHECK(set, "this run has no {} set ({}); see the lines above, --split or --{}-data-path", split_name,
            opt.eval_iters == 0 ? "--eval-iters is 0" : "none was given or left", split_name);
  OCC_CHECK(start <= set->size(), "--start {} is beyond the {} set's {} samples", start, split_name, set->size());
  const int64_t end = std::min(set->size(), start + first);
  std::vector<int32_t> ids(size_t(set->seq_length()) + 1);
  std::string line;
  for (int64_t p = start; p < end; ++p) {
    set->sample(p, ids.data());
    line = fmt::format("{}", p);
    if (text) {
      line += " " + nlohmann::json(tokenizer->decode(ids)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    } else {
      for (int32_t id : ids) fmt::format_to(std::back_inserter(line), " {}", id);
    }
    line += '\n';
    std::fwrite(line.data(), 1, line.size(), stdout);
  }
  return 0;
}

}  // namespace occ::cmd
