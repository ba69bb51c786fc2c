#pragma once
// The parameters one rank holds: every tensor of its pipeline stage, sliced to
// its tensor-parallel shard, laid out in one flat buffer (llm.c style) so that
// gradients, optimizer moments and checkpoints are single buffers too.
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace occ {

// Which dimension of the full tensor is split across the TP group.
// Dim0Halves: the full tensor is two stacked halves [a; b] (SwiGLU's gate and up
// projections, Megatron's packed --swiglu weight), each split along dim 0, and a
// shard is [a_r; b_r]: every rank holds the gate and up rows of the same columns.
enum class TpSplit { None, Dim0, Dim1, Dim0Halves };

enum class InitKind { Normal, Zeros, Ones };

struct ParamTensor {
  std::string name;                  // e.g. "layers.3.mlp.dense_h_to_4h.weight"
  std::vector<int64_t> full_shape;   // shape in the unsplit model
  std::vector<int64_t> shape;        // shape of this rank's shard
  TpSplit split = TpSplit::None;
  int64_t offset = 0;                // into the flat buffer
  int64_t numel = 0;                 // of the shard
  InitKind init = InitKind::Zeros;
  float init_std = 0.0f;
  bool weight_decay = false;         // matrices only: not biases, not LayerNorm
  // Counted once in the global grad norm: false for the TP copies (tp_rank > 0)
  // of replicated tensors and for the last stage's copy of the tied embedding.
  bool counts_in_norm = true;
  bool word_embedding = false;       // either copy of the tied word embedding (never set when untied)
  uint64_t init_key = 0;             // identifies the full tensor for the RNG

  int64_t rows() const { return shape[0]; }
  int64_t cols() const { return shape.size() > 1 ? shape[1] : 1; }
  // Flat index of shard element i in the full tensor.
  int64_t global_index(int64_t i, int tp_rank) const;
};

// Offsets of the tensors a transformer layer uses, into the flat buffer; -1 for
// a tensor the architecture lacks (RMSNorm's bias, every linear bias with
// --disable-bias-linear).
struct LayerParams {
  int64_t ln1_w = -1, ln1_b = -1, qkv_w = -1, qkv_b = -1, proj_w = -1, proj_b = -1, ln2_w = -1, ln2_b = -1,
          fc_w = -1, fc_b = -1, fcproj_w = -1, fcproj_b = -1;
};

class ParamLayout {
 public:
  ParamLayout(const GptConfig& cfg, const ParallelLayout& layout);

  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  int64_t total() const { return total_; }
  const ParamTensor& find(const std::string& name) const;
  // Local layer i: the i-th this rank holds, in model order (chunk 0's first,
  // then chunk 1's, ...); layer_index(i) is its index in the whole model.
  const LayerParams& layer(int local_index) const { return layers_.at(local_index); }
  int layer_index(int local_index) const { return layer_index_.at(local_index); }
  int num_local_layers() const { return int(layers_.size()); }
  // -1 where this stage does not hold the tensor.
  int64_t word_embedding = -1, position_embedding = -1, final_ln_w = -1, final_ln_b = -1;
  // The weight the LM head multiplies with: the untied output layer; tied, the
  // word embedding itself on a single-stage run, else the last stage's own copy.
  int64_t head_weight = -1;

  // Fills `params` (size total()) with the init of the full model sliced to this shard.
  void initialize(float* params, uint64_t seed) const;

 private:
  int64_t add(const std::string& name, std::vector<int64_t> full_shape, TpSplit split, InitKind init, float std,
              bool weight_decay);
  GptConfig cfg_;
  ParallelLayout layout_;
  std::vector<ParamTensor> tensors_;
  std::vector<LayerParams> layers_;
  std::vector<int> layer_index_;
  int64_t total_ = 0;
};

}  // namespace occ
