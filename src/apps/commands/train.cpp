#include "apps/commands/commands.h"
#include "apps/commands/train_flags.h"
#include "train/trainer.h"

namespace occ::cmd {

int train(int argc, char** argv) {
  CLI::App app{"Train a GPT model (Megatron flag names; --config FILE.json accepted)", "train"};
  TrainOptions opt;
  add_train_flags(app, opt);
  app.add_option("--vocab-size", opt.model.vocab_size, "vocabulary size when no --tokenizer-model is given");
  if (int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;
  Trainer trainer(opt);
  trainer.run();
  return 0;
}

}  // namespace occ::cmd
