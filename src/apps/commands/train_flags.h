#pragma once
// Megatron-named flags bound to TrainOptions, and `--config FILE.json`
// (keys are the flag names, with '-' or '_'; flags on the command line win).
#include <CLI/CLI.hpp>

#include "train/options.h"

namespace occ::cmd {

void add_model_flags(CLI::App& app, GptConfig& model);
void add_optimizer_flags(CLI::App& app, TrainOptions& o);
void add_train_flags(CLI::App& app, TrainOptions& o);  // model + optimizer + data + logging + checkpoints

// Parses argv (after expanding --config FILE.json in place, so that later flags
// override it). Returns -1 to go on, or the exit code (0 after --help).
// Parse errors are thrown as a one-line occ::UsageError (exit code 2).
int parse_command_line(CLI::App& app, int argc, char** argv);

}  // namespace occ::cmd
