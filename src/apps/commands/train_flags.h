#pragma once
// Megatron-named flags bound to TrainOptions (parsed by parse_command_line).
#include <CLI/CLI.hpp>

#include "apps/commands/command_line.h"  // parse_command_line, for every command

#include "train/options.h"

namespace occ::cmd {

void add_model_flags(CLI::App& app, GptConfig& model);
void add_optimizer_flags(CLI::App& app, TrainOptions& o);
void add_attention_backend_flag(CLI::App& app, TrainOptions& o);  // --attention-backend (train and bench)
void add_train_flags(CLI::App& app, TrainOptions& o);  // model + optimizer + data + logging + checkpoints
// The train command's flags: add_train_flags and --vocab-size (train, and launch's check of its train command).
void add_train_command_flags(CLI::App& app, TrainOptions& o);
// --tokenizer-type, --tokenizer-model, --vocab-file, --merge-file (Megatron's names).
void add_tokenizer_flags(CLI::App& app, TokenizerSpec& spec);


// After parsing add_train_flags' flags: a compression flag given (on the command
// line or in --config) where it would change nothing is a one-line UsageError,
// naming the flag and the flag it needs, rather than silently ignored (e.g.
// --grad-comp-topk-fraction without --grad-comp, --inter-grad-comp-topk-fraction
// with a method other than topk, --inter-grad-comp-rank with one other than powersgd).
void refuse_inapplicable_flags(const CLI::App& app, const TrainOptions& o);
// The model flags' part of it (also for reference-dump and bench): --num-query-groups
// without --group-query-attention, --rotary-base / --rotary-percent without RoPE.
void refuse_inapplicable_model_flags(const CLI::App& app, const GptConfig& m);

}  // namespace occ::cmd
