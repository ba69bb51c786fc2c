#pragma once
// Megatron's blending index (helpers.cpp build_blending_indices, NVIDIA/
// Megatron-LM d98e8a64): sample i of a blend goes to the dataset whose
// weight_d * max(i, 1) - count_d is largest (the first on ties), as that
// dataset's next sample. Bit for bit under any compiler flags: the product is
// rounded before the subtraction, as Megatron's helper (g++ -std=c++17, which
// does not contract) rounds it, never fused into one multiply-add. A file of
// its own (core/error.h only), so that tests/march/ can build it at two -march.
#include <cstdint>
#include <vector>

namespace occ {

void build_blending_index(const std::vector<double>& weights, int64_t size, int16_t* dataset, int64_t* dataset_sample);

}  // namespace occ
