#pragma once
// Where this process sits in the TP x PP x DP grid (Megatron's rank layout:
// rank = pp * DP * TP + dp * TP + tp) and which layers its stage owns. With
// the interleaved schedule a rank holds vp_size model chunks: chunk c of
// pipeline rank s is virtual stage c * P + s (Megatron's placement).
// Plain arithmetic that layers from parallel/ to plan/ all need, so it lives
// at the bottom (core/) rather than in any one of them.
#include "core/error.h"

namespace occ {

struct ParallelLayout {
  int tp_size = 1, pp_size = 1, dp_size = 1;
  int tp_rank = 0, pp_rank = 0, dp_rank = 0;
  int vp_size = 1;  // model chunks per pipeline rank (--num-layers-per-virtual-pipeline-stage)

  int world_size() const { return tp_size * pp_size * dp_size; }
  int global_rank() const { return pp_rank * dp_size * tp_size + dp_rank * tp_size + tp_rank; }
  // This rank holds the embedding (in its chunk 0) / the LM head (in its last chunk).
  bool first_stage() const { return pp_rank == 0; }
  bool last_stage() const { return pp_rank == pp_size - 1; }
  int virtual_stages() const { return pp_size * vp_size; }
  int virtual_stage(int chunk) const { return chunk * pp_size + pp_rank; }
  bool holds_embedding(int chunk) const { return virtual_stage(chunk) == 0; }
  bool holds_head(int chunk) const { return virtual_stage(chunk) == virtual_stages() - 1; }

  static ParallelLayout from_rank(int rank, int world, int tp, int pp) {
    OCC_CHECK(tp >= 1 && pp >= 1, "tensor- and pipeline-model-parallel sizes must be >= 1");
    OCC_CHECK(world % (tp * pp) == 0,
              "world size {} is not divisible by tensor-model-parallel-size {} x pipeline-model-parallel-size {}; "
              "launch a multiple of {} ranks",
              world, tp, pp, tp * pp);
    ParallelLayout l;
    l.tp_size = tp;
    l.pp_size = pp;
    l.dp_size = world / (tp * pp);
    l.tp_rank = rank % tp;
    l.dp_rank = (rank / tp) % l.dp_size;
    l.pp_rank = rank / (tp * l.dp_size);
    return l;
  }
};

// The contiguous block of transformer layers one model chunk of a rank owns
// (its whole stage without interleaving).
struct LayerRange {
  int begin = 0, end = 0;
  int count() const { return end - begin; }
};
inline LayerRange chunk_layers(int num_layers, const ParallelLayout& l, int chunk) {
  const int per = num_layers / l.virtual_stages(), v = l.virtual_stage(chunk);
  return {v * per, (v + 1) * per};
}

}  // namespace occ
