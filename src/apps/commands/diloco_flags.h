#pragma once
// DiLoCo's flags (--diloco-*), bound to TrainOptions::diloco (train/diloco_config.h).
#include <CLI/CLI.hpp>

#include "train/options.h"

namespace occ::cmd {

void add_diloco_flags(CLI::App& app, TrainOptions& o);
// A --diloco-* flag that would change nothing (no --diloco-inner-steps; --diloco-mixing
// without overlap; a topk fraction without topk) is a one-line UsageError.
void refuse_inapplicable_diloco_flags(const CLI::App& app, const TrainOptions& o);

}  // namespace occ::cmd
