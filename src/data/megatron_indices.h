#pragma once
// Megatron-core's data indices, computed as its code computes them (NVIDIA/
// Megatron-LM at d98e8a64, megatron/core/datasets/: gpt_dataset.py,
// helpers.cpp, blended_megatron_dataset_builder.py, blended_dataset.py,
// blended_megatron_dataset_config.py, utils.py), so that a run reads the same
// samples in the same order as Megatron for the same flags. Checked element for
// element against indices made by Megatron's own code (tests/unit/megatron/).
//
// A GPT dataset over sequences [begin, end) of an indexed dataset ("documents"
// in Megatron's names: one per sequence) has three indices:
//   document index: the sequence ids repeated once per epoch, shuffled with
//     NumPy's RandomState(seed) over all epochs together, or, when the last epoch
//     contributes fewer than 80 % of an epoch's samples (a "separate final
//     epoch"), the first E - 1 epochs together and the last apart;
//   sample index (helpers.cpp build_sample_idx): (position in the document
//     index, token offset) where each sample of seq_length + 1 tokens starts,
//     num_samples + 1 rows, each sample ending on the next one's first token;
//   shuffle index: 0 .. num_samples - 1 shuffled by the same generator (with a
//     separate final epoch: the samples before it and the rest apart).
// Sample i of the dataset is the sample at row shuffle[i] of the sample index.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/blending_index.h"
#include "data/numpy_random.h"

namespace occ {

class IndexedDataset;

// Sequences [begin, end) of an indexed dataset.
struct SequenceRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// --split as Megatron reads it (parse_and_normalize_split, convert_split_vector_to_
// split_matrix): 1 to 3 non-negative weights separated by ',' or '/', missing ones 0,
// normalised as numpy does; the bookends are their running sums. A split whose
// bookends meet (a zero weight) is none. Throws a one-line occ::Error on a
// malformed string.
using SplitBookends = std::optional<std::pair<double, double>>;
std::array<SplitBookends, 3> split_matrix(const std::string& split);
// The sequences of a split: [round(begin * N), round(end * N)), rounding half to
// even as Python's round does.
SequenceRange split_sequences(const std::pair<double, double>& bookends, int64_t num_sequences);

// numpy.sum of a float64 array (NumPy's pairwise summation) and Megatron's
// normalize (each weight divided by that sum).
double numpy_sum(const double* values, int64_t n);
std::vector<double> normalize_weights(const std::vector<double>& weights);

// How many samples a blend asks of a dataset of normalised weight w for a target
// of `target` samples (_get_size_per_split_per_dataset): ceil(target * w) without
// surplus, ceil(ceil(target * w) * (1 + surplus)) with.
int64_t blend_part_size(int64_t target, double weight, double surplus = 0.0);
// Megatron's mid_level_dataset_surplus default.
constexpr double kBlendSurplus = 0.005;

// What a GPT dataset's indices hold, decided before any is built.
struct GptIndexPlan {
  int seq_length = 0;
  int64_t num_sequences = 0;           // the split's, per epoch
  int64_t tokens_per_epoch = 0;
  int64_t requested_samples = -1;      // the samples asked for; -1: one epoch (Megatron's None)
  int64_t num_epochs = 1;
  bool separate_final_epoch = false;
  int64_t samples_sans_final_epoch = 0;  // with a separate final epoch
  int64_t num_samples = 0;               // samples built: sample index rows - 1
  int64_t document_index_size() const { return num_epochs * num_sequences; }
  // Megatron's dtypes: sample index int32 unless the document index outgrows it;
  // shuffle index uint32 unless num_samples reaches 2^32 - 2.
  bool sample_index_int64() const;
  bool shuffle_index_int64() const;
};
// Throws a one-line occ::Error (naming `what`) when the split holds no tokens
// (Megatron's epoch loop would never end) or the counts overflow the formats. (A
// split of one token, which Megatron's helper asserts against, gives samples of
// that token repeated: the same rule, followed.)
GptIndexPlan plan_gpt_indices(int64_t tokens_per_epoch, int64_t num_sequences, int64_t requested_samples,
                              int seq_length, const std::string& what);

// The three builders, writing into arrays the caller sized from the plan, each
// drawing from `rng` in Megatron's order (document index, then shuffle index).
void build_document_index(const GptIndexPlan& plan, SequenceRange range, NumpyRandomState& rng, int32_t* out);
template <class T>
void build_sample_index(const GptIndexPlan& plan, const IndexedDataset& ds, const int32_t* document_index, T* out);
template <class T>
void build_shuffle_index(const GptIndexPlan& plan, NumpyRandomState& rng, T* out);

}  // namespace occ
