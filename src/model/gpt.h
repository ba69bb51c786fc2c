#pragma once
// One pipeline stage of a GPT, holding one tensor-parallel shard: the layers
// of its stage, plus the embeddings on the first stage and the final
// LayerNorm, LM head and loss on the last. Explicit forward and backward per
// layer (llm.c style), fp32, activations [N = micro_batch * seq, features].
#include <cstdint>
#include <functional>
#include <vector>

#include "comm/communicator.h"
#include "core/timer.h"
#include "model/config.h"
#include "model/params.h"

namespace occ {

// What a stage needs to know about one micro-batch.
struct MicroBatch {
  const int32_t* inputs = nullptr;  // [B, T] token ids (first stage)
  const int32_t* labels = nullptr;  // [B, T] next tokens (last stage)
  int B = 0, T = 0;
  int64_t sample_base = 0;  // position of its first sample in the global batch (dropout coordinates)
  int64_t iteration = 0;    // dropout key
  float grad_scale = 1.0f;  // d(total loss)/d(summed token loss): 1 / (tokens per micro-batch * micro-batches)
};

// Activations one micro-batch keeps between its forward and its backward.
struct LayerActivations {
  std::vector<float> input;                 // [N, C] residual stream entering the layer
  std::vector<float> ln1, ln1_mean, ln1_rstd;  // [N, C], [N], [N]
  std::vector<float> qkv;                   // [N, 3C/T]
  std::vector<float> probs, probs_dropped;  // [B, H/T, T, T]
  std::vector<float> atty;                  // [N, C/T]
  std::vector<float> residual1;             // [N, C] after attention's bias-dropout-add
  std::vector<float> ln2, ln2_mean, ln2_rstd;
  std::vector<float> fc, fc_gelu;           // [N, 4C/T]
};

struct StageActivations {
  std::vector<LayerActivations> layers;
  std::vector<float> output;              // [N, C] last layer's output
  std::vector<float> lnf, lnf_mean, lnf_rstd;  // last stage
  std::vector<float> logits;              // [N, V/T] (becomes d loss / d logits in backward)
  std::vector<float> ce_max, ce_sum_exp;  // [N]
};

class GptStage {
 public:
  GptStage(const GptConfig& cfg, const ParallelLayout& layout, Communicator& tp, uint64_t seed);

  const GptConfig& config() const { return cfg_; }
  const ParallelLayout& layout() const { return layout_; }
  const ParamLayout& param_layout() const { return params_layout_; }
  std::vector<float>& params() { return params_; }
  const std::vector<float>& params() const { return params_; }
  std::vector<float>& grads() { return grads_; }
  void zero_grads();

  // Forward of one micro-batch. x_in: [N, C] from the previous stage (ignored
  // on the first stage); x_out: [N, C] for the next stage (ignored on the last).
  // On the last stage returns the summed token loss of the micro-batch.
  // training=false disables dropout and skips what only backward needs.
  double forward(StageActivations& acts, const MicroBatch& mb, const float* x_in, float* x_out, bool training);
  // Backward of a micro-batch whose forward filled `acts`. dx_out: gradient of
  // this stage's output (ignored on the last stage); dx_in: gradient of its
  // input, written for the previous stage (ignored on the first stage).
  // Accumulates into grads().
  // grads_final (optional) is told, as backward proceeds, the lowest offset
  // from which this backward's contributions to grads() are complete.
  void backward(StageActivations& acts, const MicroBatch& mb, const float* dx_out, float* dx_in,
                const std::function<void(int64_t)>& grads_final = nullptr);

  // Last stage after forward(training=false): logits of this rank's vocabulary shard.
  const float* logits(const StageActivations& acts) const { return acts.logits.data(); }

  PhaseTimers& timers() { return timers_; }

 private:
  void allocate(StageActivations& acts, int B, int T, bool training) const;
  void layer_forward(int local, LayerActivations& a, float* out, const MicroBatch& mb, bool training);
  // dresid: [N, C] gradient of the layer's output in, of its input out.
  void layer_backward(int local, LayerActivations& a, float* dresid, const MicroBatch& mb);
  void tp_allreduce(float* data, size_t count);

  GptConfig cfg_;
  ParallelLayout layout_;
  Communicator& tp_;
  uint64_t seed_;
  LayerRange layers_;
  ParamLayout params_layout_;
  std::vector<float> params_, grads_;
  // Backward scratch, shared by all micro-batches (one backward runs at a time).
  std::vector<float> branch_;  // forward scratch [N, C]
  std::vector<float> d_resid_, d_ln_, d_qkv_, d_atty_, d_fc_, d_branch_;
  std::vector<float> ce_target_;
  PhaseTimers timers_;
};

}  // namespace occ
