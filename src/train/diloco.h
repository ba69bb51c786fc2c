#pragma once
// DiLoCo (Douillard et al. 2023, arXiv 2311.08105) and Streaming DiLoCo
// (arXiv 2501.18512) as a data-parallel mode (--diloco-inner-steps H). Each DP
// replica, a whole TP x PP pipeline, takes H inner steps with its own AdamW
// and no data-parallel gradient all-reduce (GradientSync leaves the DP group
// alone; the tied embedding still syncs inside the replica every step); then
// the outer step averages the replicas' progress over the DP group and applies
// it to the outer parameters with Nesterov momentum. The inner optimizer's
// state is kept across rounds. Conventions (docs/diloco.md has them in full):
//
//  * Outer step, per element, with theta the outer parameters, mean the
//    replicas' average of their local parameters and Delta = theta - mean (the
//    pseudo-gradient: old minus new), as torch.optim.SGD(nesterov=True,
//    dampening=0):   v <- mu v + Delta;   theta <- theta - lr (Delta + mu v),
//    computed (in double, rounded once) as theta <- mean + ((1 - lr) Delta - lr mu v),
//    which is `mean` bit for bit when lr = 1 and mu = 0.
//  * The wire: uncompressed, the replicas' local parameters are all-reduced
//    (summed; mean = sum / D exactly as the ring adds, Delta = theta - mean).
//    With --diloco-outer-comp-method each replica encodes its own
//    Delta_i = theta - local_i instead (the small difference is what quantises
//    well; rows as the tensor's shape[0], 1-D tensors one row), the group
//    all-gathers the wires, and every rank decodes and sums them in rank
//    order in fp32: Delta = sum / D, mean = theta - Delta.
//    With --diloco-outer-comp-error-feedback each replica first adds its residual
//    e_i (what its codec dropped last time; fp32, zero at the start) and keeps the
//    new one: m_i = Delta_i + e_i, send C(m_i), e_i <- m_i - decode(C(m_i)).
//  * Fragments (--diloco-fragments F, strided as the paper found best): layer l
//    belongs to fragment l mod F; the word and position embeddings and the LM
//    head's copy of the tied word embedding to fragment 0 (with layer 0: both
//    copies of the tie then sync together and stay identical); the final
//    LayerNorm and an untied output layer (--untie-embeddings-and-output-weights)
//    to the last layer's fragment. Uncompressed, a fragment's word
//    embedding copy is all-reduced as a message of its own, so that both
//    stages' rings add its elements in the same order.
//  * Schedule: fragment f's syncs start after inner steps t = offset(f) + k H
//    (k >= 0), offset(f) = (f + 1) H / F (integer division; F = 1: t = H, 2H,
//    ...). The all-reduce runs beside the next tau = --diloco-overlap-steps
//    inner steps on a thread of its own (parallel/background_collectives.h);
//    after step s + tau the fragment's outer update lands: local <- alpha local
//    + (1 - alpha) theta (alpha = --diloco-mixing); tau = 0: local <- theta.
//  * Checkpoints: every rank saves its replica's local parameters and AdamW
//    moments, and the outer parameters and momentum, in
//    mp_rank_TT_PPP/diloco_dp_DDD.bin; a sync in flight at a save is finished
//    and its outer step applied first (the same arithmetic as at its landing),
//    so a run resumes bit-exactly at any inner step. The error-feedback residual
//    (outer/residual/*) is saved there too.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compress/compressor.h"
#include "compress/error_feedback.h"
#include "core/buffer.h"
#include "core/tensor_file.h"
#include "core/timer.h"
#include "model/params.h"
#include "parallel/background_collectives.h"
#include "parallel/topology.h"
#include "train/adamw.h"
#include "train/diloco_config.h"

namespace occ {

// The round schedule (pure): when each fragment's sync starts and lands.
struct DilocoSchedule {
  int inner_steps = 1, fragments = 1, overlap = 0;
  explicit DilocoSchedule(const DilocoConfig& c) : inner_steps(c.inner_steps), fragments(c.fragments), overlap(c.overlap_steps) {}
  // The first inner step after which fragment f syncs: (f + 1) H / F, in [1, H].
  int64_t offset(int f) const { return int64_t(f + 1) * inner_steps / fragments; }
  // Does fragment f's sync start after inner step t (1-based)?
  bool starts_after(int64_t t, int f) const { return t >= offset(f) && (t - offset(f)) % inner_steps == 0; }
  // The start s of fragment f's latest sync at or before step t, or -1.
  int64_t last_start(int64_t t, int f) const {
    return t < offset(f) ? -1 : offset(f) + (t - offset(f)) / inner_steps * inner_steps;
  }
  // The sync of fragment f started but not landed after step t (s <= t < s + tau), or -1.
  int64_t in_flight_after(int64_t t, int f) const {
    const int64_t s = last_start(t, f);
    return s >= 0 && t < s + overlap ? s : -1;
  }
};

// The fragment a tensor of the model belongs to (the rules above), from its name.
int diloco_fragment_of(const std::string& tensor_name, int num_layers, int fragments);

// The outer step over n elements (host memory): outer and momentum updated in
// place from the replicas' mean and Delta = outer - mean (both given: the
// uncompressed path knows mean exactly, the compressed one Delta).
void diloco_outer_step(float* outer, float* momentum, const float* mean, const float* delta, int64_t n, float lr,
                       float momentum_coef);

class Diloco {
 public:
  // params: the stage's parameters as initialised (the first outer parameters);
  // dp: the replicas' group (duplicated for the outer all-reduce's thread);
  // where: this rank's place (names its --debug-diloco-dump files).
  // dump_dir (test only): every outer step writes its inputs and results there.
  Diloco(const DilocoConfig& cfg, const ParamLayout& layout, int num_layers, const DeviceBuffer<float>& params,
         const MpiCommunicator& dp, double comm_timeout_s, const ParallelLayout& where, std::string dump_dir = {});
  ~Diloco();

  // After inner step t (1-based) has updated `params`: lands the fragments
  // due (merging their outer update into params), then starts the syncs due.
  // The bytes of the syncs that landed are added to `counters`.
  void after_inner_step(int64_t t, DeviceBuffer<float>& params, PhaseTimers& timers, TrafficCounters& counters);

  // Checkpoint state: finishes the syncs in flight (their outer step applied,
  // still to land), then returns this rank's file, in memory.
  TensorFileWriter state(const DeviceBuffer<float>& params, const AdamW& adam, int64_t iteration);
  // Loads this rank's file (its replica's parameters and moments replace the
  // checkpoint's common ones); returns false when the file does not exist (a
  // checkpoint of a run without DiLoCo: restart_from() then).
  bool load(const std::string& path, DeviceBuffer<float>& params, AdamW& adam, int64_t iteration);
  // The outer parameters become `params`, the momentum zero (a checkpoint without DiLoCo state).
  void restart_from(const DeviceBuffer<float>& params);
  // load(), or restart_from() the checkpoint's weights with a notice (printed where `print`).
  void resume(const std::string& path, DeviceBuffer<float>& params, AdamW& adam, int64_t iteration, bool print);
  // A run without DiLoCo loading a checkpoint that has DiLoCo state: a notice (where `print`).
  static void note_unused_state(const std::string& path, bool print);
  // This rank's state file inside a checkpoint's shard directory.
  static std::string file_name(int dp_rank);

  int64_t outer_numel() const { return int64_t(outer_.size()); }

 private:
  struct Span {
    std::string name;
    std::vector<int64_t> shape;
    int64_t offset = 0, numel = 0, rows = 1, cols = 1;
    bool word_embedding = false;
  };
  enum class State { Idle, InFlight, Applied };
  struct Fragment {
    std::vector<Span> spans;  // the word-embedding copy first (its own message), then by offset
    int64_t numel = 0, tied_numel = 0;
    std::vector<float> send, gathered;  // the message; the all-gathered wires (compressed)
    std::vector<std::unique_ptr<MatrixCompressor>> codecs;  // per span (compressed)
    std::vector<ErrorFeedback*> feedback;  // per span: codecs[i] itself with EF (its residual e_i), else empty
    std::vector<int64_t> wire_offset;
    int64_t wire_total = 0;
    State state = State::Idle;
    int64_t started_at = -1;
    std::vector<BackgroundCollectives::Ticket> tickets;
    uint64_t bytes = 0;                  // of the sync in flight or applied, reported when it lands
    std::vector<float> sent_locals;      // --debug-diloco-dump: the local parameters as sent
    std::vector<float> sent_residuals;   // --debug-diloco-dump with EF: the residual added before encoding
  };
  // Keys span i's codec with the sync's start step (--diloco-outer-comp-rotation).
  void key_rotation(Fragment& fr, size_t i);
  void start(int f, int64_t t, const DeviceBuffer<float>& params, PhaseTimers& timers);
  // Waits for fragment f's collectives and applies its outer step.
  void apply(int f, PhaseTimers* timers);
  void land(int f, DeviceBuffer<float>& params, PhaseTimers& timers, TrafficCounters& counters);
  // --debug-diloco-dump: DIR/sync_SSSSSS_fF_WHAT_ppP_tpT_dpD.bin, one tensor per
  // (array, span) named ARRAY/TENSOR; each array holds the fragment's spans packed.
  void dump(int f, const std::string& what, const std::vector<std::pair<std::string, const float*>>& arrays) const;

  DilocoConfig cfg_;
  DilocoSchedule schedule_;
  int dp_size_ = 1, dp_rank_ = 0;
  std::string dump_dir_, dump_tag_;
  std::vector<Fragment> fragments_;
  std::vector<float> outer_, momentum_;  // this rank's parameters: theta and v
  // --diloco-outer-comp-error-feedback: each span's codec is wrapped in compress/'s
  // ErrorFeedback (the same decorator as LEP's and DP's), whose residuals share one
  // scratch (two buffers of the largest span, not two per span).
  ErrorFeedbackScratch feedback_scratch_;
  std::vector<float> scratch_;
  std::string load_notice_;  // what resume() prints after load() (EF state absent or unused)
  std::unique_ptr<BackgroundCollectives> exchange_;
};

}  // namespace occ
