#pragma once
// Discrete simulation of one training iteration as a dependency graph, built
// the way our engine runs it (parallel/pipeline_executor.cpp): 1F1B per stage
// on its main thread (plain, or interleaved over model chunks whose messages
// go round the ring of stages), nonblocking sends that occupy one directed
// link per neighbouring stage pair in FIFO order, blocking receives followed by
// decompression (CB) and the TP all-gather (scatter-gather), the DP reducer
// thread that all-reduces buckets as the last micro-batch's backward
// finalises them, then DP PowerSGD, embedding synchronisation, the global
// grad-norm all-reduce, the optimizer (and the distributed optimizer's
// parameter all-gather after it, or, overlapped, the previous update's
// gathered from the iteration's start beside the forwards that wait for each
// region). Every node keeps the predecessor
// that determined its start, so the critical path falls out by walking back.
// All durations are inputs (seconds): plan/model_cost.h derives them.
#include <map>
#include <string>
#include <vector>

#include "compress/compressed_backprop.h"

namespace occ::plan {

enum class Category { Compute, PipelineComm, TpGather, Compress, Decompress, DataParallel, Embedding, Optimizer, Sync };
const char* category_name(Category c);
const std::vector<Category>& all_categories();

struct BucketTime {
  double ready_fraction = 1.0;  // of the last backward, when its gradients are final
  double seconds = 0.0;         // the all-reduce
  double bytes = 0.0;           // per rank, for reports
};

// --overlap-param-gather: one region (gradient bucket) of the distributed
// optimizer's parameter all-gather. The regions of the previous update are
// gathered one after the other on a thread of their own from the start of the
// iteration; the first forward of `chunk` waits for a region once `needed_at`
// (a fraction) of its compute has run: where it first reads those parameters.
struct GatherRegion {
  double seconds = 0.0;
  int chunk = 0;
  double needed_at = 0.0;
};

// One phase of DP PowerSGD on the main thread (compress, P all-reduce, ...).
struct Phase {
  std::string name;
  Category category;
  double seconds = 0.0;
};

struct StageTimes {
  double forward = 0, backward = 0;   // one micro-batch, TP collectives inside included
  // Interleaved: the same per model chunk (the head and embedding sit in
  // particular chunks); empty: forward / V and backward / V each.
  std::vector<double> chunk_forwards, chunk_backwards;
  double chunk_forward(int c, int V) const { return chunk_forwards.empty() ? forward / V : chunk_forwards[size_t(c)]; }
  double chunk_backward(int c, int V) const {
    return chunk_backwards.empty() ? backward / V : chunk_backwards[size_t(c)];
  }
  double send_forward = 0;            // link occupancy of one activation message to s+1 (mod P)
  double send_backward = 0;           // ... of one activation-gradient message to s-1 (mod P)
  double send_backward_compressed = 0;
  // Of each send above, the link latency: the message is in flight for it after
  // leaving the link, which meanwhile carries the next message (a long path
  // holds several messages at once); the receiver waits for the arrival.
  double send_forward_latency = 0, send_backward_latency = 0;
  double compress = 0;                // CB encode of one backward message (sender)
  double decompress = 0;              // CB decode of one message received from s+1
  double gather = 0;                  // TP all-gather after each receive
  std::vector<BucketTime> buckets;    // DP reducer thread, in order
  std::vector<Phase> dp_compression;  // DP PowerSGD after the buckets (SC: empty on stages >= K)
  double optimizer = 0;
  double param_allgather = 0;         // distributed optimizer: after the update (0: none or overlapped)
  std::vector<GatherRegion> param_gather_regions;  // overlapped instead, in gather order
  double sp_grad_allreduce = 0;       // sequence parallelism: LayerNorm / bias gradients over TP, after the schedule
};

struct SimInput {
  int micro_batches = 1;
  int chunks = 1;                     // model chunks per stage (interleaved 1F1B when > 1)
  std::vector<StageTimes> stages;     // P entries
  CompressedBackpropConfig cb;        // which backward sends are compressed (CB/EC)
  double embedding_sync = 0;          // first <-> last stage (or FE group) all-reduce
  bool embedding_sync_on = false;     // does the run synchronise the tied embedding at all
  double grad_norm_sync = 0;          // all-reduce over every stage before the optimizer
  double loss_sync = 0;               // world all-reduce that ends the iteration
  // Megatron v2.5 style: the main thread waits for each send to complete
  // (our engine's sends are nonblocking; see parallel/pipeline_exchange.h).
  bool blocking_sends = false;
};

struct SimNode {
  std::string name;
  Category category;
  int stage;
  double start, end;
  int pred;  // the node whose end (or partial progress) set this start; -1: time 0
};

struct SimResult {
  double iteration = 0;            // seconds
  std::vector<SimNode> nodes;
  std::vector<int> critical_path;  // node ids from the first to the last
  // Seconds of the critical path per category (sums to `iteration`).
  std::map<Category, double> critical;
  // Busy seconds per category summed over stages, divided by P (Fig. 10 style).
  std::map<Category, double> busy_per_stage;
  std::vector<double> stage_ready;  // when each stage's gradients were synchronised (before grad-norm sync)
  // Seconds the critical path spends in nodes whose name contains `pattern`.
  double critical_seconds_matching(const std::string& pattern) const;
};

SimResult simulate(const SimInput& input);

}  // namespace occ::plan
