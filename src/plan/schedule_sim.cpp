#include "plan/schedule_sim.h"

#include <algorithm>
#include <initializer_list>

#include <fmt/format.h>

#include "core/error.h"
#include "parallel/pipeline_schedule.h"

namespace occ::plan {

const char* category_name(Category c) {
  switch (c) {
    case Category::Compute: return "compute";
    case Category::PipelineComm: return "pp_comm";
    case Category::TpGather: return "tp_allgather";
    case Category::Compress: return "compress";
    case Category::Decompress: return "decompress";
    case Category::DataParallel: return "dp_comm";
    case Category::Embedding: return "emb_sync";
    case Category::Optimizer: return "optimizer";
    case Category::Sync: return "sync";
  }
  return "?";
}

const std::vector<Category>& all_categories() {
  static const std::vector<Category> all = {Category::Compute,    Category::PipelineComm, Category::TpGather,
                                            Category::Compress,   Category::Decompress,   Category::DataParallel,
                                            Category::Embedding,  Category::Optimizer,    Category::Sync};
  return all;
}

double SimResult::critical_seconds_matching(const std::string& pattern) const {
  double sum = 0;
  for (size_t i = 0; i < critical_path.size(); ++i) {
    const SimNode& n = nodes[size_t(critical_path[i])];
    const double join = i + 1 < critical_path.size() ? nodes[size_t(critical_path[i + 1])].start : n.end;
    if (n.name.find(pattern) != std::string::npos) sum += std::min(join, n.end) - n.start;
  }
  return sum;
}

namespace {

// A dependency: a node (its end, or a point inside it) or nothing (time 0).
struct Dep {
  int node = -1;
  double time = 0.0;
};

class Graph {
 public:
  std::vector<SimNode> nodes;
  Dep end_of(int id) const { return id < 0 ? Dep{} : Dep{id, nodes[size_t(id)].end}; }
  // Starts when the latest dependency is met; the latest one becomes its predecessor.
  int add(std::string name, Category c, int stage, std::initializer_list<Dep> deps, double seconds) {
    Dep latest;
    for (const Dep& d : deps)
      if (d.node >= 0 && (latest.node < 0 || d.time > latest.time)) latest = d;
    nodes.push_back({std::move(name), c, stage, latest.time, latest.time + seconds, latest.node});
    return int(nodes.size()) - 1;
  }
};

}  // namespace

SimResult simulate(const SimInput& in) {
  const int P = int(in.stages.size()), M = in.micro_batches, V = in.chunks;
  OCC_CHECK(P >= 1 && M >= 1 && V >= 1, "simulation needs at least one stage, micro-batch and model chunk");
  OCC_CHECK(V == 1 || (P >= 2 && M % P == 0),
            "the interleaved schedule needs >= 2 stages and a micro-batch count divisible by them ({} over {})", M, P);
  Graph g;
  std::vector<std::vector<PipelineOp>> ops(static_cast<size_t>(P));
  std::vector<std::vector<std::vector<bool>>> late(static_cast<size_t>(P));  // EC's rule per sender
  for (int s = 0; s < P; ++s) {
    ops[size_t(s)] = pipeline_program(P, V, s, M);
    late[size_t(s)] = backwards_after_last_forward(ops[size_t(s)], V, M);
  }
  // Virtual stage c * P + s holds chunk c of stage s; messages wrap from the last rank to the first.
  auto virtual_stage = [P](int s, int c) { return c * P + s; };
  const int last_virtual = P * V - 1;
  auto label = [V](int j, int c) { return V == 1 ? fmt::format("{}", j) : fmt::format("{}.c{}", j, c); };
  std::vector<size_t> next(size_t(P), 0);
  std::vector<int> thread(size_t(P), -1);
  std::vector<std::vector<int>> last_backward(size_t(P), std::vector<int>(size_t(V), -1));  // per chunk
  std::vector<int> link_fwd(size_t(P), -1), link_bwd(size_t(P), -1);  // last transfer on s->s+1 / s->s-1
  // Messages sent by (stage, chunk, micro-batch), indexed [stage][chunk * M + mb].
  std::vector<std::vector<int>> fwd_msg(size_t(P), std::vector<int>(size_t(V) * size_t(M), -1)), bwd_msg = fwd_msg;
  std::vector<std::vector<int>> sends(static_cast<size_t>(P));
  auto at = [M](int c, int j) { return size_t(c) * size_t(M) + size_t(j); };
  // --overlap-param-gather: the previous update's regions, gathered one after
  // the other from the iteration's start on a thread of their own.
  std::vector<std::vector<int>> gathered(static_cast<size_t>(P));
  std::vector<std::vector<bool>> first_forward_done(size_t(P), std::vector<bool>(size_t(V), false));
  for (int s = 0; s < P; ++s) {
    int prev_region = -1;
    for (size_t r = 0; r < in.stages[size_t(s)].param_gather_regions.size(); ++r) {
      prev_region = g.add(fmt::format("s{} dp all-gather parameters region {} (overlapped)", s, r),
                          Category::DataParallel, s, {g.end_of(prev_region)},
                          in.stages[size_t(s)].param_gather_regions[r].seconds);
      gathered[size_t(s)].push_back(prev_region);
    }
  }
  // A forward of chunk c: the first one waits for each region where it first reads its parameters.
  auto forward = [&](int s, int c, const std::string& name, int th) {
    const StageTimes& st = in.stages[size_t(s)];
    const double total = st.chunk_forward(c, V);
    if (st.param_gather_regions.empty() || first_forward_done[size_t(s)][size_t(c)])
      return g.add(fmt::format("s{} F{}", s, name), Category::Compute, s, {g.end_of(th)}, total);
    first_forward_done[size_t(s)][size_t(c)] = true;
    double done = 0;  // fraction of the forward already run
    for (size_t r = 0; r < st.param_gather_regions.size(); ++r) {
      const GatherRegion& region = st.param_gather_regions[r];
      if (region.chunk != c) continue;
      if (region.needed_at > done) {
        th = g.add(fmt::format("s{} F{} (part)", s, name), Category::Compute, s, {g.end_of(th)},
                   (region.needed_at - done) * total);
        done = region.needed_at;
      }
      th = g.add(fmt::format("s{} F{} waits for parameters region {}", s, name, r), Category::Sync, s,
                 {g.end_of(th), g.end_of(gathered[size_t(s)][r])}, 0.0);
    }
    return g.add(fmt::format("s{} F{}", s, name), Category::Compute, s, {g.end_of(th)}, (1.0 - done) * total);
  };

  // A send occupies its link for its time less the latency; the message then
  // travels for the latency (a node of its own), and that arrival is what the
  // receiver waits for.
  auto occupancy = [](double send, double latency) { return send - std::clamp(latency, 0.0, send); };
  auto in_flight = [&](int x, double send, double latency) {
    const double lat = std::clamp(latency, 0.0, send);
    if (lat <= 0) return x;
    const SimNode& sent = g.nodes[size_t(x)];
    return g.add(sent.name + " (in flight: latency)", Category::PipelineComm, sent.stage, {g.end_of(x)}, lat);
  };
  // Runs each stage's program as far as its messages allow; 1F1B (plain or
  // interleaved) never deadlocks.
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < P; ++s) {
      const StageTimes& st = in.stages[size_t(s)];
      const int prev = (s + P - 1) % P, nxt = (s + 1) % P;
      int& th = thread[size_t(s)];
      while (next[size_t(s)] < ops[size_t(s)].size()) {
        const PipelineOp op = ops[size_t(s)][next[size_t(s)]];
        const int j = op.micro_batch, c = op.chunk, vs = virtual_stage(s, c);
        const std::string name = label(j, c);
        if (op.kind == PipelineOp::Forward) {
          if (vs > 0) {
            const int msg = fwd_msg[size_t(prev)][at(forward_sender_chunk(s, c), j)];
            if (msg < 0) break;
            th = g.add(fmt::format("s{} recv F{} gather", s, name), Category::TpGather, s,
                       {g.end_of(th), g.end_of(msg)}, st.gather);
          }
          th = forward(s, c, name, th);
          if (vs < last_virtual) {
            const int x = g.add(fmt::format("s{} send F{} to s{}", s, name, nxt), Category::PipelineComm, s,
                                {g.end_of(th), g.end_of(link_fwd[size_t(s)])}, occupancy(st.send_forward, st.send_forward_latency));
            link_fwd[size_t(s)] = x;
            fwd_msg[size_t(s)][at(c, j)] = in_flight(x, st.send_forward, st.send_forward_latency);
            sends[size_t(s)].push_back(x);
            if (in.blocking_sends) th = x;
          }
        } else {
          if (vs < last_virtual) {
            const int sender_chunk = backward_sender_chunk(P, s, c);
            const int msg = bwd_msg[size_t(nxt)][at(sender_chunk, j)];
            if (msg < 0) break;
            if (CompressedBackprop::compresses(in.cb, late[size_t(nxt)][size_t(sender_chunk)][size_t(j)]))
              th = g.add(fmt::format("s{} decompress B{}", s, name), Category::Decompress, s,
                         {g.end_of(th), g.end_of(msg)}, st.decompress);
            th = g.add(fmt::format("s{} recv B{} gather", s, name), Category::TpGather, s,
                       {g.end_of(th), g.end_of(msg)}, st.gather);
          }
          th = g.add(fmt::format("s{} B{}", s, name), Category::Compute, s, {g.end_of(th)}, st.chunk_backward(c, V));
          if (j == M - 1) last_backward[size_t(s)][size_t(c)] = th;
          if (vs > 0) {
            const bool compressed = CompressedBackprop::compresses(in.cb, late[size_t(s)][size_t(c)][size_t(j)]);
            if (compressed)
              th = g.add(fmt::format("s{} compress B{}", s, name), Category::Compress, s, {g.end_of(th)}, st.compress);
            const double send = compressed ? st.send_backward_compressed : st.send_backward;
            const int x = g.add(fmt::format("s{} send B{} to s{}{}", s, name, prev, compressed ? " (compressed)" : ""),
                                Category::PipelineComm, s, {g.end_of(th), g.end_of(link_bwd[size_t(s)])},
                                occupancy(send, st.send_backward_latency));
            link_bwd[size_t(s)] = x;
            bwd_msg[size_t(s)][at(c, j)] = in_flight(x, send, st.send_backward_latency);
            sends[size_t(s)].push_back(x);
            if (in.blocking_sends) th = x;
          }
        }
        ++next[size_t(s)];
        progress = true;
      }
    }
  }
  for (int s = 0; s < P; ++s)
    OCC_CHECK(next[size_t(s)] == ops[size_t(s)].size(), "internal: the simulated pipeline stalled at stage {}", s);

  for (int s = 0; s < P; ++s) {
    const StageTimes& st = in.stages[size_t(s)];
    int& th = thread[size_t(s)];
    // wait_sends(): every nonblocking send of the schedule has left.
    int latest_send = -1;
    for (int x : sends[size_t(s)])
      if (latest_send < 0 || g.nodes[size_t(x)].end > g.nodes[size_t(latest_send)].end) latest_send = x;
    th = g.add(fmt::format("s{} wait sends", s), Category::Sync, s, {g.end_of(th), g.end_of(latest_send)}, 0.0);
    // The reducer thread: bucket b starts when the last backward has finalised
    // it. Interleaved, the top 1/V of the stage's backward work is chunk V-1's
    // last backward, the next 1/V chunk V-2's, and so on.
    int reducer = -1;
    for (size_t b = 0; b < st.buckets.size(); ++b) {
      const double f = std::clamp(st.buckets[b].ready_fraction, 0.0, 1.0) * V;
      const int from_top = std::min(V - 1, int(f));
      const int lb = last_backward[size_t(s)][size_t(V - 1 - from_top)];
      const SimNode last = g.nodes[size_t(lb)];
      const Dep ready{lb, last.start + (f - from_top) * (last.end - last.start)};
      reducer = g.add(fmt::format("s{} dp all-reduce bucket {}", s, b), Category::DataParallel, s,
                      {ready, g.end_of(reducer)}, st.buckets[b].seconds);
    }
    if (st.sp_grad_allreduce > 0)  // Megatron: after the backward, before the DP gradients are used
      th = g.add(fmt::format("s{} sequence-parallel LayerNorm gradients all-reduce (TP)", s), Category::Sync, s,
                 {g.end_of(th)}, st.sp_grad_allreduce);
    th = g.add(fmt::format("s{} dp wait", s), Category::Sync, s, {g.end_of(th), g.end_of(reducer)}, 0.0);
    for (const Phase& ph : st.dp_compression)
      th = g.add(fmt::format("s{} {}", s, ph.name), ph.category, s, {g.end_of(th)}, ph.seconds);
  }
  if (in.embedding_sync_on) {
    const int e = g.add("embedding all-reduce (first + last stage)", Category::Embedding, 0,
                        {g.end_of(thread[0]), g.end_of(thread[size_t(P - 1)])}, in.embedding_sync);
    thread[0] = thread[size_t(P - 1)] = e;
  }
  SimResult r;
  for (int s = 0; s < P; ++s) r.stage_ready.push_back(thread[size_t(s)] < 0 ? 0.0 : g.nodes[size_t(thread[size_t(s)])].end);
  int latest = -1;
  for (int s = 0; s < P; ++s)
    if (latest < 0 || g.nodes[size_t(thread[size_t(s)])].end > g.nodes[size_t(latest)].end) latest = thread[size_t(s)];
  const int norm = g.add("grad-norm all-reduce (all stages)", Category::Sync, -1, {g.end_of(latest)}, in.grad_norm_sync);
  int final_opt = -1;
  for (int s = 0; s < P; ++s) {
    // Overlapped, every region has arrived before the update (the forwards waited for them all).
    const int gather_end = gathered[size_t(s)].empty() ? -1 : gathered[size_t(s)].back();
    int o = g.add(fmt::format("s{} optimizer", s), Category::Optimizer, s, {g.end_of(norm), g.end_of(gather_end)},
                  in.stages[size_t(s)].optimizer);
    if (in.stages[size_t(s)].param_allgather > 0)  // distributed optimizer: every shard to every DP rank
      o = g.add(fmt::format("s{} dp all-gather parameters", s), Category::DataParallel, s, {g.end_of(o)},
                in.stages[size_t(s)].param_allgather);
    if (final_opt < 0 || g.nodes[size_t(o)].end > g.nodes[size_t(final_opt)].end) final_opt = o;
  }
  const int end = g.add("loss all-reduce (world)", Category::Sync, -1, {g.end_of(final_opt)}, in.loss_sync);

  r.iteration = g.nodes[size_t(end)].end;
  for (int id = end; id >= 0; id = g.nodes[size_t(id)].pred) r.critical_path.push_back(id);
  std::reverse(r.critical_path.begin(), r.critical_path.end());
  for (Category c : all_categories()) r.critical[c] = 0, r.busy_per_stage[c] = 0;
  for (size_t i = 0; i < r.critical_path.size(); ++i) {
    const SimNode& n = g.nodes[size_t(r.critical_path[i])];
    const double join = i + 1 < r.critical_path.size() ? g.nodes[size_t(r.critical_path[i + 1])].start : n.end;
    r.critical[n.category] += std::min(join, n.end) - n.start;  // a bucket may start inside a backward
  }
  for (const SimNode& n : g.nodes) r.busy_per_stage[n.category] += (n.end - n.start) / double(P);
  r.nodes = std::move(g.nodes);
  return r;
}

}  // namespace occ::plan
