// Fuzzes `--config FILE.json` as train reads it: the JSON object is turned into
// flags, parsed by train's command line (CLI11 conversions of every value) and
// checked as train checks it (inapplicable flags, then the options' validation
// for a single process).
#include <CLI/CLI.hpp>

#include "apps/commands/train_flags.h"
#include "core/layout.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace occ;
  const std::string path = fuzz::scratch_dir() + "/config.json";
  fuzz::write_file(path, fuzz::as_view(data, size));
  fuzz::parse_or_refuse([&] {
    CLI::App app{"fuzzed train", "train"};
    TrainOptions opt;
    cmd::add_train_flags(app, opt);
    app.add_option("--vocab-size", opt.model.vocab_size, "vocabulary size when no --tokenizer-model is given");
    std::string argv0 = "optimus-cc", flag = "--config", file = path;
    char* argv[] = {argv0.data(), flag.data(), file.data(), nullptr};
    if (cmd::parse_command_line(app, 3, argv) >= 0) return;  // --help
    cmd::refuse_inapplicable_flags(app, opt);
    opt.validate(ParallelLayout{});
    (void)opt.to_json().dump();
  });
  return 0;
}
