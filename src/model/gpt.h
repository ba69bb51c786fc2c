#pragma once
// One pipeline stage of a GPT, holding one tensor-parallel shard: the layers
// of its stage, plus the embeddings on the first stage and the final
// LayerNorm, LM head and loss on the last. Explicit forward and backward per
// layer (llm.c style), activations [N = micro_batch * seq, features], fp32 or
// (a GPU in --bf16 / --fp16) 16-bit.
// Every tensor lives in DeviceBuffers of the stage's device and every kernel
// runs through that device's Ops (kernels/ops.h): the same code trains on the
// CPU and on a GPU.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/buffer.h"
#include "core/tensor_buffer.h"
#include "core/timer.h"
#include "core/wire_format.h"
#include "kernels/ops.h"
#include "model/block.h"
#include "model/config.h"
#include "model/params.h"
#include "parallel/sequence_parallel.h"

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
  // The most logits one classifier chunk holds; 0: kClassifierValues (gpt.cpp).
  // Tests make it small, so that small models run the chunked loss in pieces.
  int64_t classifier_values = 0;
  // --sequence-parallel (with a TP group of 2 or more; parallel/sequence_parallel.h):
  // the residual stream, its norms and dropout are this rank's share of the
  // rows, and forward's x_in / x_out and backward's dx_out / dx_in are read
  // and written only in that share (the pipeline exchange moves only it).
  bool sequence_parallel = false;
  // The formats its TP collectives travel in (core/wire_format.h): a --bf16 /
  // --fp16 run's activations and their sums in 16 bits, parameter gradients
  // in fp32 unless --grad-reduce-in-bf16; statistics always fp32.
  WireFormats wire = {};
};

// What a stage needs to know about one micro-batch.
struct MicroBatch {
  const int32_t* inputs = nullptr;  // [B, T] token ids (first stage), host memory
  const int32_t* labels = nullptr;  // [B, T] next tokens (last stage), host memory
  int B = 0, T = 0;
  int64_t sample_base = 0;  // position of its first sample in the global batch (dropout coordinates)
  int64_t iteration = 0;    // dropout key
  float grad_scale = 1.0f;  // d(total loss)/d(summed token loss): 1 / (tokens per micro-batch * micro-batches)
  // Forward without training: keep this rank's whole [B*T, V/T] logits
  // (StageActivations::logits) for `generate` and the reference checks. A
  // training forward never materialises them (the classifier runs in chunks).
  bool keep_logits = false;
  // The model chunk's last backward of the iteration: with sequence
  // parallelism, backward sums the partial gradients of the parameters that
  // act on each rank's share of the rows (norms, row-parallel biases) over TP
  // here, once per iteration and before grads_final reports them.
  bool last_backward = false;
};

using Buffer = DeviceBuffer<float>;

// Activations one micro-batch keeps between its forward and its backward
// (with full recomputation, only `input`; the rest lives in the stage's
// scratch). Tensors are in the stage's storage format (Ops::storage_format);
// softmax and norm statistics are fp32. Widths are BlockShape's (this rank's).
struct LayerActivations {
  LayerActivations(Device d, Precision storage)
      : input(d, storage), ln1(d, storage), ln1_mean(d), ln1_rstd(d), qkv(d, storage), attn_saved(d),
        atty(d, storage), residual1(d, storage), ln2(d, storage), ln2_mean(d), ln2_rstd(d), fc(d, storage),
        fc_act(d, storage) {}
  // With sequence parallelism, the residual stream (input, residual1) and the
  // norm statistics hold this rank's N/T rows; ln1 and ln2 stay whole (all-gathered).
  TensorBuffer input;              // [N, C] residual stream entering the layer
  TensorBuffer ln1;                // [N, C]
  Buffer ln1_mean, ln1_rstd;       // [N] (the mean: LayerNorm only)
  TensorBuffer qkv;                // [N, qkv]: q, k rotated (RoPE) as attention reads them
  Buffer attn_saved;               // what attention's backward needs (Ops::attention_saved_floats)
  TensorBuffer atty;               // [N, attn]
  TensorBuffer residual1;          // [N, C] after attention's bias-dropout-add
  TensorBuffer ln2;
  Buffer ln2_mean, ln2_rstd;
  TensorBuffer fc, fc_act;         // [N, fc] and [N, ffn]: before and after the GeLU / SwiGLU
};

struct StageActivations {
  StageActivations(Device d, Precision storage)
      : device(d), storage(storage), tokens(d), labels(d), output(d, storage), lnf(d, storage), lnf_mean(d),
        lnf_rstd(d), dlnf(d, storage), logits(d, storage) {}
  Device device;
  Precision storage;
  // The micro-batch's token ids and labels on the device, uploaded once by
  // forward for its backward (unused on the CPU, which reads the host arrays).
  DeviceBuffer<int32_t> tokens, labels;
  std::vector<LayerActivations> layers;
  TensorBuffer output;              // [N, C] last layer's output (sequence parallel: [N/T, C])
  TensorBuffer lnf;                 // last stage: final norm [N, C]
  Buffer lnf_mean, lnf_rstd;        // [N]
  // Last stage, training: d loss / d lnf (this rank's part, before the TP
  // all-reduce), computed by forward with the loss chunk by chunk, so that no
  // more than one chunk of logits exists at a time.
  TensorBuffer dlnf;
  TensorBuffer logits;              // [N, V/T] with MicroBatch::keep_logits only
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
    stale_.assign(1, {0, int64_t(params_.size())});
    return params_;
  }
  const Buffer& params() const { return params_; }
  Buffer& grads() { return grads_; }
  const Buffer& grads() const { return grads_; }
  void zero_grads();
  // The format the step's tensors are stored in: fp32 on the CPU, the 16-bit
  // format itself on a GPU in --bf16 / --fp16 (kernels/ops.h).
  Precision storage() const { return storage_; }
  // Activations of one micro-batch, on this stage's device.
  StageActivations make_activations() const { return StageActivations(opt_.device, storage_); }

  // Forward of one micro-batch through model chunk `chunk` (interleaved
  // schedule; 0 otherwise). x_in: [N, C] from the previous virtual stage
  // (ignored where the chunk starts with the embedding); x_out: [N, C] for the
  // next (ignored where it ends with the head); both on the stage's device
  // (the pipeline exchange stages them through host memory for MPI, after
  // compressing them on the device).
  // With the head and labels, adds the micro-batch's summed token loss to the
  // stage's loss sum on the device (take_loss_sum() reads it), and when
  // training computes the LM head's gradients too (its weight gradient into
  // grads(), d loss / d lnf into acts.dlnf for backward), so that the logits
  // of one chunk of tokens at a time exist, never all of them.
  // training=false disables dropout and skips what only backward needs.
  void forward(StageActivations& acts, const MicroBatch& mb, const float* x_in, float* x_out, bool training,
               int chunk = 0);
  // The token losses summed by forward since the last call, and resets the sum:
  // the one point where a step's loss reaches the host (it waits for the device).
  double take_loss_sum();
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

  // Last stage after forward with MicroBatch::keep_logits: this rank's logits
  // [B*T, V/T] as fp32 host values.
  std::vector<float> logits_to_host(const StageActivations& acts) const { return acts.logits.to_host_f32(); }

  PhaseTimers& timers() { return timers_; }

  // Called before the stage reads the parameters [offset, offset + numel) of
  // params(): forward calls it for the embedding, each layer and the head just
  // before their use, and every other reader for the whole buffer. The owner of
  // the parameters (the trainer's overlapped all-gather of the distributed
  // optimizer, --overlap-param-gather) blocks there until they are complete.
  // Unset: they always are. The reduced-precision copy of a range is refreshed
  // after its wait, range by range, so it never holds half-gathered values.
  using ParamsReady = std::function<void(int64_t offset, int64_t numel)>;
  void set_params_ready(ParamsReady ready) { params_ready_ = std::move(ready); }

 private:
  struct Span {
    int64_t offset = 0, numel = 0;
  };
  void allocate(StageActivations& acts, int B, int T, bool training, bool head);
  void allocate_layer(LayerActivations& a, int B, int T, bool training, bool keep_attention) const;
  // Forward: `host` ids on this stage's device (uploaded into buf off the CPU).
  const int32_t* upload_ids(DeviceBuffer<int32_t>& buf, const int32_t* host, int64_t n);
  // Backward: the ids forward uploaded (the host array itself on the CPU).
  const int32_t* uploaded_ids(const DeviceBuffer<int32_t>& buf, const int32_t* host) const {
    return opt_.device == Device::Cpu ? host : buf.data();
  }
  kernels::Dropout dropout(const MicroBatch& mb, int local, uint64_t site, float p, bool training) const;
  // A dropout site on the residual stream: this rank's rows under sequence parallelism.
  kernels::Dropout stream_dropout(const MicroBatch& mb, int local, uint64_t site, float p, bool training) const;
  // Sequence parallelism: is it on; the residual-stream rows of an N-row
  // micro-batch this rank holds (N without it) and the first of them.
  bool sp() const { return sp_ != nullptr; }
  int64_t stream_rows(int64_t N) const { return sp_ ? sp_->local_rows(N) : N; }
  int64_t stream_row0(int64_t N) const { return sp_ ? sp_->first_row(N) : 0; }
  // Out of a row-parallel layer: the partial sums `full` [N, C] reduce-scattered
  // into this rank's rows (sequence parallel), or all-reduced in place.
  TensorRef leave_tp_region(TensorRef full, TensorBuffer& local, int64_t N);
  // Learned positions added to `rows` rows from the micro-batch's row `row0` (a
  // sequence-parallel share may start and end inside a sample).
  void add_positions(float* e, ConstTensorRef wpe, int64_t row0, int64_t rows, int64_t T);
  kernels::AttentionShape attention_shape(int B, int T) const;
  // A parameter's weights (its gradient) at `offset`; null where the layout has
  // no such tensor (offset -1: a bias the architecture lacks).
  static ConstTensorRef at(ConstTensorRef P, int64_t offset) { return offset < 0 ? ConstTensorRef() : P + offset; }
  float* grad(int64_t offset) { return offset < 0 ? nullptr : grads_.data() + offset; }
  NormStats stats(Buffer& mean, Buffer& rstd) const { return {mean.empty() ? nullptr : mean.data(), rstd.data()}; }
  // RoPE on the layer's q and k (forward) or their gradients (backward); no-op without RoPE.
  void rope(TensorRef qkv, const kernels::AttentionShape& shape, bool backward);
  // The working activations of the chunk's layer l: its own, or the shared
  // scratch under full recomputation.
  LayerActivations& layer_work(StageActivations& acts, int l);
  void layer_forward(int local, ConstTensorRef input, LayerActivations& a, TensorRef out, const MicroBatch& mb,
                     bool training);
  // dresid: [N, C] gradient of the layer's output in, of its input out.
  void layer_backward(int local, ConstTensorRef input, LayerActivations& a, TensorRef dresid, const MicroBatch& mb);
  // The LM head and the loss over the final LayerNorm's output, chunk by chunk (forward's last part).
  void classifier(StageActivations& acts, const MicroBatch& mb, bool training);
  // A TP all-reduce of an activation (or activation gradient) the ranks hold
  // partial sums of, on the activation sums' wire: in the 16-bit format (the
  // default of a --bf16 / --fp16 run, hop by hop as NCCL), or in fp32 (16-bit
  // tensors through an fp32 copy), the sum rounded to the training precision.
  void tp_allreduce(TensorRef x, int64_t n);
  // The weights the step computes with: the master weights, or their copy in
  // the training precision (refreshed where stale), in the storage format.
  // weights() makes the whole buffer ready; weights_for(span) only that range
  // (the rest of the returned view may be stale: read only the span).
  ConstTensorRef weights() { return weights_for({0, int64_t(params_.size())}); }
  ConstTensorRef weights_for(Span span);
  // The smallest range holding the tensors at these offsets (-1: absent, skipped).
  Span span_covering(std::initializer_list<int64_t> offsets) const;
  // Rounds an fp32-stored tensor to the training precision (a 16-bit tensor
  // was rounded by the kernel that wrote it: nothing to do).
  void lp(TensorRef x, int64_t n) {
    if (x.is_fp32()) ops_.round_to_precision(x.f32(), n, opt_.precision);
  }
  // Rows of one classifier chunk: at most kClassifierValues logits at a time.
  int64_t classifier_rows(int64_t N, int64_t V) const;

  GptConfig cfg_;
  ParallelLayout layout_;
  Communicator& tp_;
  uint64_t seed_;
  StageOptions opt_;
  kernels::Ops& ops_;
  BlockOps block_;        // the layer's shape on this rank and its variant parts
  int chunk_layers_ = 0;  // transformer layers per model chunk
  ParamLayout params_layout_;
  Buffer params_, grads_;
  Precision storage_ = Precision::Fp32;
  TensorBuffer params_lp_;  // the weights in the training precision (bf16/fp16 only), storage format
  std::vector<Span> stale_;  // ranges of params_lp_ older than params_ (disjoint)
  ParamsReady params_ready_;
  // What forward reads, part by part (empty spans where the stage has no such part).
  Span embedding_span_, final_ln_span_, head_weight_span_;
  std::vector<Span> layer_spans_;  // per local layer
  // Scratch shared by all micro-batches (one forward or backward runs at a time).
  TensorBuffer branch_;  // forward scratch [N, C]
  TensorBuffer d_resid_, d_ln_, d_qkv_, d_atty_, d_fc_, d_branch_;
  Buffer embedding_;     // [N, C] the embedding's sum in fp32 (its TP all-reduce is exact)
  Buffer rope_table_;    // RoPE's cos / sin (kernels::rope_table) for rope_positions_ positions
  int64_t rope_positions_ = 0;
  WireScratch tp_wire_;  // a tensor in its wire's format during a TP collective
  TensorBuffer logits_;  // one classifier chunk [rows, V/T]
  Buffer ce_max_, ce_sum_exp_, ce_target_;  // [rows]
  DeviceBuffer<double> loss_sum_;           // [1] summed token losses on the device
  // Recomputation: the layer activations rebuilt in backward (full), the
  // attention state rebuilt (selective), and a sink for recomputed outputs.
  LayerActivations recompute_layer_;
  Buffer recompute_saved_;
  TensorBuffer recompute_out_;
  // Sequence parallelism (null without): its collectives, and scratch of this
  // rank's rows: a norm's output before its all-gather (backward: the norm's
  // reduce-scattered output gradient), and a row-parallel layer's
  // reduce-scattered output (backward: its output gradient before the
  // all-gather). Forward and backward never hold them at once (a full
  // recomputation's forward finishes before the layer's backward starts).
  std::unique_ptr<SequenceParallelComm> sp_;
  TensorBuffer sp_norm_rows_, sp_branch_rows_;
  Buffer sp_embedding_;  // the embedding's reduce-scattered rows (fp32)
  PhaseTimers timers_;
};

}  // namespace occ
