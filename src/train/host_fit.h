#pragma once
// What no machine of this one's memory could hold, refused at start-up before any
// of it is allocated, naming the flags (met later, it is std::bad_alloc, or hours
// of paging). Lower bounds of one rank's need: the fp32 weights, gradients and
// Adam's two moments of its share of the model (with DiLoCo the outer copy and
// momentum too), and one activation tensor per layer of its stage for a
// micro-batch. (The sample index is checked by data/training_data.h.)
#include "core/layout.h"
#include "train/options.h"

namespace occ {

// Throws a one-line occ::Error naming the flags.
void check_fits_host(const TrainOptions& options, const ParallelLayout& layout);

}  // namespace occ
