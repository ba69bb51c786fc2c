#pragma once
// One pipeline stage of a GPT, holding one tensor-parallel shard: the layers
// of its stage, plus the embeddings on the first stage and the final
// LayerNorm, LM head and loss on the last. Explicit forward and backward per
// layer (llm.c style), fp32, activations [N = micro_batch * seq, features].
// Every tensor lives in DeviceBuffers of the stage's device and every kernel
// runs through that device's Ops (kernels/ops.h): the same code trains on the
// CPU and on a GPU.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/buffer.h"
#include "core/timer.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "model/params.h"

namespace occ {


struct StageOptions {
  Device device = Device::Cpu;
  Recompute recompute = Recompute::None;
  // Megatron's --bf16 / --fp16: the step computes with weights and activations
  // (and activation gradients) rounded to the format; the master weights, the
  // gradient accumulation and the optimizer stay fp32. Loss scaling (fp16) is
  // the trainer's: it scales MicroBatch::grad_scale and unscales the gradients.
  Precision precision = Precision::Fp32;
  // The backend to run on; null: kernels::ops_for(device). bench --op-profile
  // passes a kernels::TimedOps around it.
  kernels::Ops* ops = nullptr;
};

// What a stage needs to know about one micro-batch.
struct MicroBatch {
  const int32_t* inputs = nullptr;  // [B, T] token ids (first stage), host memory
  const int32_t* labels = nullptr;  // [B, T] next tokens (last stage), host memory
  int B = 0, T = 0;
  int64_t sample_base = 0;  // position of its first sample in the global batch (dropout coordinates)
  int64_t iteration = 0;    // dropout key
  float grad_scale = 1.0f;  // d(total loss)/d(summed token loss): 1 / (tokens per micro-batch * micro-batches)
};

using Buffer = DeviceBuffer<float>;

// Activations one micro-batch keeps between its forward and its backward
// (with full recomputation, only `input`; the rest lives in the stage's scratch).
struct LayerActivations {
  explicit LayerActivations(Device d = Device::Cpu)
      : input(d), ln1(d), ln1_mean(d), ln1_rstd(d), qkv(d), attn_saved(d), atty(d), residual1(d), ln2(d),
        ln2_mean(d), ln2_rstd(d), fc(d), fc_gelu(d) {}
  Buffer input;                    // [N, C] residual stream entering the layer
  Buffer ln1, ln1_mean, ln1_rstd;  // [N, C], [N], [N]
  Buffer qkv;                      // [N, 3C/T]
  Buffer attn_saved;               // what attention's backward needs (Ops::attention_saved_floats)
  Buffer atty;                     // [N, C/T]
  Buffer residual1;                // [N, C] after attention's bias-dropout-add
  Buffer ln2, ln2_mean, ln2_rstd;
  Buffer fc, fc_gelu;              // [N, 4C/T]
};

struct StageActivations {
  explicit StageActivations(Device d = Device::Cpu)
      : device(d), tokens(d), labels(d), output(d), lnf(d), lnf_mean(d), lnf_rstd(d), logits(d), ce_max(d),
        ce_sum_exp(d) {}
  Device device;
  // The micro-batch's token ids and labels on the device, uploaded once by
  // forward for its backward (unused on the CPU, which reads the host arrays).
  DeviceBuffer<int32_t> tokens, labels;
  std::vector<LayerActivations> layers;
  Buffer output;                    // [N, C] last layer's output
  Buffer lnf, lnf_mean, lnf_rstd;   // last stage
  Buffer logits;                    // [N, V/T] (becomes d loss / d logits in backward)
  Buffer ce_max, ce_sum_exp;        // [N]
};

class GptStage {
 public:
  GptStage(const GptConfig& cfg, const ParallelLayout& layout, Communicator& tp, uint64_t seed,
           StageOptions options = {});

  const GptConfig& config() const { return cfg_; }
  const ParallelLayout& layout() const { return layout_; }
  const ParamLayout& param_layout() const { return params_layout_; }
  Device device() const { return opt_.device; }
  kernels::Ops& ops() { return ops_; }
  // The fp32 master weights. Non-const access marks the reduced-precision copy
  // stale, so whoever changes the weights (optimizer, checkpoint load) never
  // leaves the step computing with old ones.
  Buffer& params() {
    weights_stale_ = true;
    return params_;
  }
  const Buffer& params() const { return params_; }
  Buffer& grads() { return grads_; }
  const Buffer& grads() const { return grads_; }
  void zero_grads();
  // Activations of one micro-batch, on this stage's device.
  StageActivations make_activations() const { return StageActivations(opt_.device); }

  // Forward of one micro-batch through model chunk `chunk` (interleaved
  // schedule; 0 otherwise). x_in: [N, C] from the previous virtual stage
  // (ignored where the chunk starts with the embedding); x_out: [N, C] for the
  // next (ignored where it ends with the head); both on the stage's device
  // (the pipeline exchange stages them through host memory for MPI, after
  // compressing them on the device).
  // With the head, returns the summed token loss of the micro-batch.
  // training=false disables dropout and skips what only backward needs.
  double forward(StageActivations& acts, const MicroBatch& mb, const float* x_in, float* x_out, bool training,
                 int chunk = 0);
  // Backward of a micro-batch whose forward filled `acts`. dx_out: gradient of
  // this stage's output (ignored on the last stage); dx_in: gradient of its
  // input, written for the previous stage (ignored on the first stage); both
  // on the stage's device, as forward's.
  // Accumulates into grads().
  // grads_final (optional) is told, as backward proceeds, the lowest offset
  // from which this backward's contributions to grads() are complete.
  // The chunk's offsets are reported from its top down (chunks are laid out in
  // model order), so a chunk's last backward finalises what lies above it.
  void backward(StageActivations& acts, const MicroBatch& mb, const float* dx_out, float* dx_in,
                const std::function<void(int64_t)>& grads_final = nullptr, int chunk = 0);

  // Last stage after forward(training=false): logits of this rank's vocabulary shard (device memory).
  const float* logits(const StageActivations& acts) const { return acts.logits.data(); }

  PhaseTimers& timers() { return timers_; }

 private:
  void allocate(StageActivations& acts, int B, int T, bool training, bool head);
  void allocate_layer(LayerActivations& a, int B, int T, bool training, bool keep_attention) const;
  // Forward: `host` ids on this stage's device (uploaded into buf off the CPU).
  const int32_t* upload_ids(DeviceBuffer<int32_t>& buf, const int32_t* host, int64_t n);
  // Backward: the ids forward uploaded (the host array itself on the CPU).
  const int32_t* uploaded_ids(const DeviceBuffer<int32_t>& buf, const int32_t* host) const {
    return opt_.device == Device::Cpu ? host : buf.data();
  }
  kernels::Dropout dropout(const MicroBatch& mb, int local, uint64_t site, float p, bool training) const;
  kernels::AttentionShape attention_shape(int B, int T) const;
  // The working activations of the chunk's layer l: its own, or the shared
  // scratch under full recomputation.
  LayerActivations& layer_work(StageActivations& acts, int l);
  void layer_forward(int local, const float* input, LayerActivations& a, float* out, const MicroBatch& mb,
                     bool training);
  // dresid: [N, C] gradient of the layer's output in, of its input out.
  void layer_backward(int local, const float* input, LayerActivations& a, float* dresid, const MicroBatch& mb);
  void tp_allreduce(float* data, size_t count);
  // The weights the step computes with: the master weights, or their copy
  // rounded to the training precision (refreshed when stale).
  const float* weights();
  // Rounds an activation (or activation gradient) to the training precision.
  void lp(float* x, int64_t n) { ops_.round_to_precision(x, n, opt_.precision); }

  GptConfig cfg_;
  ParallelLayout layout_;
  Communicator& tp_;
  uint64_t seed_;
  StageOptions opt_;
  kernels::Ops& ops_;
  int chunk_layers_ = 0;  // transformer layers per model chunk
  ParamLayout params_layout_;
  Buffer params_, grads_;
  Buffer params_lp_;  // reduced-precision copy of params_ (bf16/fp16 only)
  bool weights_stale_ = true;
  // Scratch shared by all micro-batches (one forward or backward runs at a time).
  Buffer branch_;  // forward scratch [N, C]
  Buffer d_resid_, d_ln_, d_qkv_, d_atty_, d_fc_, d_branch_;
  Buffer ce_target_;
  // Recomputation: the layer activations rebuilt in backward (full), the
  // attention state rebuilt (selective), and a sink for recomputed outputs.
  LayerActivations recompute_layer_;
  Buffer recompute_saved_, recompute_out_;
  PhaseTimers timers_;
};

}  // namespace occ
