// `optimus-cc comm-check`: what a job's communication library does on this
// machine, before a training run depends on it. Every rank of mpirun fills
// buffers with values whose sums are exact in float, runs each operation the
// engine uses (all-reduce sum / max / mean, all-gather, reduce-scatter to the
// ring's owned chunks, a ring shift of send/receive, and with 2+ ranks the
// pipeline's links) through the backend --comm-backend picks (NCCL on device memory, or MPI, host-staged on a GPU),
// and compares the results with the values they must have and each
// operation's byte count with the ring's (comm/ring_volume.h; for MPI those
// are the bytes its rings really sent). Then the same collectives on the 16-bit
// wire of a --bf16 / --fp16 run (core/wire_format.h), in bf16 and fp16: the
// bytes are half, gathers exact, and sums reduced in the format step by step
// of the ring: on MPI (host or host-staged) bit for bit the ring's own order
// (communicator.h), on NCCL (whose order is its own) within the bound of its
// roundings. With --bench-iters it also times the all-reduce (nccl-tests'
// algbw and busbw).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "apps/commands/commands.h"
#include "apps/commands/mpi_runtime.h"
#include "apps/commands/train_flags.h"
#include "comm/comm_backend.h"
#include "comm/host_staged_communicator.h"
#include "comm/mpi_communicator.h"
#include "comm/nccl_communicator.h"
#include "comm/node_ranks.h"
#include "comm/ring_volume.h"
#include "core/buffer.h"
#include "core/cuda_module_loading.h"
#include "core/precision.h"
#include "core/timer.h"
#include "parallel/pipeline_links.h"

namespace occ::cmd {

namespace {

// The backend this rank ended with, and the one-line description of it.
struct Backend {
  std::unique_ptr<NcclCommunicator> nccl;
  std::unique_ptr<DeviceGroup> group;  // nccl, or MPI (through host copies on a GPU)
  std::string line;
};

// The operations under test, over whichever backend.
class Checker {
 public:
  Checker(MpiCommunicator& world, Backend& backend, Device device, TrafficCounters& counters)
      : world_(world), backend_(backend), device_(device), counters_(counters) {}

  Communicator& comm() { return backend_.group->comm(); }
  int rank() const { return world_.rank(); }
  int size() const { return world_.size(); }

  // Records a failure of `what` (kept for the job's verdict).
  void expect(bool ok, const std::string& what) {
    if (!ok && failure_.empty()) failure_ = what;
  }
  void expect_bytes(const char* op, uint64_t before, uint64_t expected) {
    const uint64_t sent = counters_[Traffic::Other] - before;
    expect(sent == expected, fmt::format("{}: rank {} counted {} bytes, the ring sends {}", op, rank(), sent, expected));
  }
  const std::string& failure() const { return failure_; }
  // The ring's chunk boundaries of `count` elements: chunk c ends at chunk_ends[c].
  const std::vector<size_t>& chunk_ends(size_t count) {
    if (chunk_ends_count_ != count) {
      chunk_ends_.clear();
      for (int c = 0; c < size(); ++c) chunk_ends_.push_back(ring_chunk(count, size(), c).lo + ring_chunk(count, size(), c).len);
      chunk_ends_count_ = count;
    }
    return chunk_ends_;
  }

  std::vector<float> on_device_then_back(const std::vector<float>& host, const std::function<void(float*)>& op) {
    DeviceBuffer<float> d(device_, host.size());
    d.copy_from_host(host.data(), host.size());
    op(d.data());
    return d.to_host();
  }

  void check_allreduce(size_t count) {
    const int n = size();
    std::vector<float> x(count);
    for (size_t i = 0; i < count; ++i) x[i] = float((rank() + 1) * int(i % 7 + 1));
    const float ranks_sum = float(n * (n + 1) / 2);
    uint64_t before = counters_[Traffic::Other];
    auto sum = on_device_then_back(x, [&](float* d) { comm().allreduce_sum(d, count, Traffic::Other); });
    expect_bytes("all-reduce (sum)", before, ring_allreduce_bytes(count, n, rank(), sizeof(float)));
    for (size_t i = 0; i < count; ++i)
      if (sum[i] != ranks_sum * float(i % 7 + 1)) {
        expect(false, fmt::format("all-reduce (sum): element {} is {}, expected {}", i, sum[i], ranks_sum * float(i % 7 + 1)));
        break;
      }
    before = counters_[Traffic::Other];
    auto max = on_device_then_back(x, [&](float* d) { comm().allreduce_max(d, count, Traffic::Other); });
    expect_bytes("all-reduce (max)", before, ring_allreduce_bytes(count, n, rank(), sizeof(float)));
    for (size_t i = 0; i < count; ++i)
      if (max[i] != float(n * int(i % 7 + 1))) {
        expect(false, fmt::format("all-reduce (max): element {} is {}, expected {}", i, max[i], n * int(i % 7 + 1)));
        break;
      }
    // The mean: NCCL's ncclAvg; MPI: the sum, then scaled on the host (what the DP reducer does).
    before = counters_[Traffic::Other];
    auto mean = on_device_then_back(x, [&](float* d) {
      if (backend_.nccl) {
        backend_.nccl->allreduce_mean(d, count, Traffic::Other);
      } else {
        comm().allreduce_sum(d, count, Traffic::Other);
        scale_on_host(d, count, 1.0f / float(n));
      }
    });
    expect_bytes("all-reduce (mean)", before, ring_allreduce_bytes(count, n, rank(), sizeof(float)));
    for (size_t i = 0; i < count; ++i) {
      const float want = ranks_sum * float(i % 7 + 1) / float(n);
      if (std::fabs(mean[i] - want) > 1e-6f * want) {
        expect(false, fmt::format("all-reduce (mean): element {} is {}, expected {}", i, mean[i], want));
        break;
      }
    }
  }

  void check_reduce_scatter(size_t count) {
    const int n = size();
    std::vector<float> x(count);
    for (size_t i = 0; i < count; ++i) x[i] = float((rank() + 1) * int(i % 5 + 1));
    const uint64_t before = counters_[Traffic::Other];
    auto got = on_device_then_back(x, [&](float* d) {
      if (backend_.nccl) {
        backend_.nccl->reduce_scatter_mean(d, count, Traffic::Other);
      } else {  // the distributed optimizer's MPI path: the ring reduce-scatter, the owned chunk scaled
        std::vector<float> h(count);
        device_copy(h.data(), Device::Cpu, d, device_, count * sizeof(float));
        world_.reduce_scatter_sum(h.data(), count, Traffic::Other);
        device_copy(d, device_, h.data(), Device::Cpu, count * sizeof(float));
        const RingChunk own = ring_owned_chunk(count, n, rank());
        scale_on_host(d + own.lo, own.len, 1.0f / float(n));
      }
    });
    expect_bytes("reduce-scatter", before, ring_reduce_scatter_bytes(count, n, rank(), sizeof(float)));
    const RingChunk own = ring_owned_chunk(count, n, rank());
    for (size_t i = own.lo; i < own.lo + own.len; ++i) {
      const float want = float(n + 1) / 2.0f * float(i % 5 + 1);
      if (std::fabs(got[i] - want) > 1e-6f * want) {
        expect(false, fmt::format("reduce-scatter: owned element {} is {}, expected {}", i, got[i], want));
        break;
      }
    }
  }

  // Communicator::reduce_scatter (sequence parallelism's): every rank gives
  // one block per rank, and gets the sum of its own block over the ranks.
  void check_block_reduce_scatter(size_t count) {
    const int n = size();
    std::vector<float> x(count * size_t(n));
    for (size_t j = 0; j < x.size(); ++j) x[j] = float((rank() + 1) * (int(j / count) * 10 + int(j % count % 7) + 1));
    DeviceBuffer<float> in(device_, x.size()), out(device_, count);
    in.copy_from_host(x.data(), x.size());
    const uint64_t before = counters_[Traffic::Other];
    comm().reduce_scatter(in.data(), out.data(), count, Traffic::Other);
    expect_bytes("block reduce-scatter", before, ring_reduce_scatter_bytes(count * size_t(n), n, rank(), sizeof(float)));
    const std::vector<float> got = out.to_host();
    for (size_t i = 0; i < count; ++i) {
      const float want = float(n * (n + 1) / 2) * float(rank() * 10 + int(i % 7) + 1);
      if (got[i] != want) {
        expect(false, fmt::format("block reduce-scatter: element {} is {}, expected {}", i, got[i], want));
        break;
      }
    }
  }

  void check_allgather(size_t count) {
    const int n = size();
    std::vector<float> x(count);
    for (size_t i = 0; i < count; ++i) x[i] = float(rank() * 1000 + int(i % 1000));
    DeviceBuffer<float> in(device_, count), out(device_, count * size_t(n));
    in.copy_from_host(x.data(), count);
    const uint64_t before = counters_[Traffic::Other];
    comm().allgather(in.data(), out.data(), count, Traffic::Other);
    expect_bytes("all-gather", before, ring_allgather_bytes(count, n, sizeof(float)));
    const std::vector<float> got = out.to_host();
    for (size_t j = 0; j < got.size(); ++j) {
      const float want = float(int(j / count) * 1000 + int(j % count % 1000));
      if (got[j] != want) {
        expect(false, fmt::format("all-gather: element {} is {}, expected {}", j, got[j], want));
        break;
      }
    }
  }

  // Each rank sends its block to the next and receives the previous one's
  // (a pipeline's transfers, all at once). One rank sends to itself.
  void check_ring_shift(size_t count) {
    const int n = size(), to = (rank() + 1) % n, from = (rank() - 1 + n) % n;
    std::vector<float> x(count);
    for (size_t i = 0; i < count; ++i) x[i] = float(rank() * 100 + int(i % 100));
    DeviceBuffer<float> send(device_, count), recv(device_, count);
    send.copy_from_host(x.data(), count);
    const size_t bytes = count * sizeof(float);
    const uint64_t before = counters_[Traffic::Other];
    if (backend_.nccl) {
      backend_.nccl->sendrecv(send.data(), bytes, to, recv.data(), bytes, from, Traffic::Other);
    } else {
      std::vector<float> hs = send.to_host(), hr(count);
      std::vector<MpiCommunicator::Request> reqs;
      reqs.push_back(world_.irecv(hr.data(), bytes, from, 7101, "a ring shift"));
      reqs.push_back(world_.isend(hs.data(), bytes, to, 7101, Traffic::Other, "a ring shift"));
      world_.wait_all(reqs);
      recv.copy_from_host(hr.data(), count);
    }
    expect_bytes("send/receive", before, bytes);
    const std::vector<float> got = recv.to_host();
    for (size_t i = 0; i < count; ++i)
      if (got[i] != float(from * 100 + int(i % 100))) {
        expect(false, fmt::format("send/receive: element {} from rank {} is {}, expected {}", i, from, got[i],
                                  from * 100 + int(i % 100)));
        break;
      }
  }

  // 2+ ranks: the pipeline's links (parallel/pipeline_links.h) over a ring of
  // every rank, as an interleaved pipeline forms them, on the backend's
  // memory (NCCL: the device's; MPI: the host's). Each rank queues three
  // messages to the next rank and three to the previous one before receiving
  // any (sends that waited for their receiver, or a receive queued behind a
  // send, would hang here), then receives in order. Returns false where it
  // did not run.
  bool check_pipeline_links(size_t count, double timeout_s) {
    if (size() < 2) return false;
    std::string why;
    PipelineLinks links = PipelineLinks::create(world_, true, backend_.nccl != nullptr, timeout_s, &why);
    // Every rank goes on only if every link formed (else the others would wait on the missing ones).
    int complete = links.complete(rank(), size(), true);
    MPI_Allreduce(MPI_IN_PLACE, &complete, 1, MPI_INT, MPI_MIN, world_.handle());
    if (!complete) {
      expect(false, "pipeline links: " + (why.empty() ? std::string("a link did not form on another rank") : why));
      return true;
    }
    const Device memory = links.on_device ? device_ : Device::Cpu;
    constexpr int kMessages = 3;
    const int n = size(), next = (rank() + 1) % n, prev = (rank() - 1 + n) % n;
    auto value = [](int sender, int forward, int k, size_t i) {
      return float(sender * 1000 + forward * 100 + k * 10 + int(i % 10));
    };
    std::vector<DeviceBuffer<float>> out;  // untouched until wait_sends
    out.reserve(2 * kMessages);
    const size_t bytes = count * sizeof(float);
    const uint64_t before = counters_[Traffic::Other];
    for (int k = 0; k < kMessages; ++k)
      for (int forward : {1, 0}) {
        std::vector<float> x(count);
        for (size_t i = 0; i < count; ++i) x[i] = value(rank(), forward, k, i);
        out.emplace_back(memory, count);
        out.back().copy_from_host(x.data(), count);
        PipelineLink& link = forward ? *links.forward_out : *links.backward_out;
        link.send_async(out.back().data(), bytes, Traffic::Other, "a test message");
      }
    DeviceBuffer<float> in(memory, count);
    for (int k = 0; k < kMessages; ++k)
      for (int forward : {1, 0}) {
        const int from = forward ? prev : next;
        (forward ? *links.forward_in : *links.backward_in).recv(in.data(), bytes, "a test message");
        const std::vector<float> got = in.to_host();
        for (size_t i = 0; i < count; ++i)
          if (got[i] != value(from, forward, k, i)) {
            expect(false, fmt::format("pipeline links: {} message {} from rank {}: element {} is {}, expected {}",
                                      forward ? "forward" : "backward", k, from, i, got[i], value(from, forward, k, i)));
            break;
          }
      }
    links.forward_out->wait_sends();
    links.backward_out->wait_sends();
    expect_bytes("pipeline links", before, 2 * kMessages * bytes);
    return true;
  }

  // ---- the 16-bit wire ------------------------------------------------------------
  // Rank r's element i: a value of the format with a fractional part, so that
  // its sums round (in [-3.9, 3.9]; a few are 0).
  static uint16_t value16(Precision f, int r, size_t i) {
    const long k = long((uint64_t(r) * 7919u + uint64_t(i) * 104729u) % 2001u) - 1000;
    return sixteen_bits(f, float(k) / 256.0f);
  }
  // The sum a ring reduction in format f leaves, starting at rank `first`
  // (which sends its value unchanged) and going round the ring: each rank
  // adds its value to the partial sum it receives and rounds (communicator.h).
  static uint16_t ring_sum16(Precision f, int n, int first, const std::function<uint16_t(int)>& of_rank) {
    uint16_t acc = of_rank(first);
    for (int k = 1; k < n; ++k) acc = sixteen_bits(f, sixteen_value(f, of_rank((first + k) % n)) + sixteen_value(f, acc));
    return acc;
  }
  // Is a 16-bit sum (of value `got`) right? MPI: the ring's own bits; NCCL:
  // within `roundings` roundings of the exact sum (unit roundoff 2^-8 bf16, 2^-11 fp16).
  bool sum16_ok(Precision f, double got, uint16_t ring, int roundings, const std::function<uint16_t(int)>& of_rank) const {
    if (!backend_.nccl) return got == double(sixteen_value(f, ring));
    double exact = 0, magnitude = 0;
    for (int r = 0; r < size(); ++r) {
      exact += sixteen_value(f, of_rank(r));
      magnitude += std::fabs(sixteen_value(f, of_rank(r)));
    }
    const double u = f == Precision::Bf16 ? 0x1p-8 : 0x1p-11;
    return std::fabs(got - exact) <= double(roundings) * u * magnitude;
  }
  std::vector<uint16_t> sixteen_on_device_then_back(const std::vector<uint16_t>& host,
                                                    const std::function<void(uint16_t*)>& op) {
    DeviceBuffer<uint16_t> d(device_, host.size());
    d.copy_from_host(host.data(), host.size());
    op(d.data());
    return d.to_host();
  }

  void check_sixteen_bit(size_t count, Precision f) {
    const int n = size();
    const std::string name = precision_name(f);
    std::vector<uint16_t> x(count);
    for (size_t i = 0; i < count; ++i) x[i] = value16(f, rank(), i);
    // All-reduce (TP's activations, the embedding sync and SP's gradients with --grad-reduce-in-bf16).
    uint64_t before = counters_[Traffic::Other];
    auto sum = sixteen_on_device_then_back(x, [&](uint16_t* d) { comm().allreduce_sum(TensorRef(d, f), count, Traffic::Other); });
    expect_bytes((name + " all-reduce (sum)").c_str(), before, ring_allreduce_bytes(count, n, rank(), 2));
    for (size_t i = 0; i < count; ++i) {
      const int chunk = int(std::upper_bound(chunk_ends(count).begin(), chunk_ends(count).end(), i) - chunk_ends(count).begin());
      auto of_rank = [&](int r) { return value16(f, r, i); };
      const uint16_t ring = ring_sum16(f, n, chunk, of_rank);
      if (!sum16_ok(f, sixteen_value(f, sum[i]), ring, n - 1, of_rank) || (!backend_.nccl && sum[i] != ring)) {
        expect(false, fmt::format("{} all-reduce (sum): element {} is {}, the ring's sum is {}", name, i,
                                  sixteen_value(f, sum[i]), sixteen_value(f, ring)));
        break;
      }
    }
    // All-gather (pipeline messages' TP gathers, SP): exact, half the bytes.
    DeviceBuffer<uint16_t> in(device_, count), out(device_, count * size_t(n));
    in.copy_from_host(x.data(), count);
    before = counters_[Traffic::Other];
    comm().allgather(ConstTensorRef(in.data(), f), TensorRef(out.data(), f), count, Traffic::Other);
    expect_bytes((name + " all-gather").c_str(), before, ring_allgather_bytes(count, n, 2));
    const std::vector<uint16_t> gathered = out.to_host();
    for (size_t j = 0; j < gathered.size(); ++j)
      if (gathered[j] != value16(f, int(j / count), j % count)) {
        expect(false, fmt::format("{} all-gather: element {} differs from rank {}'s", name, j, j / count));
        break;
      }
    // Block reduce-scatter (SP's): rank r's block of the sum, which the ring starts on rank r + 1.
    std::vector<uint16_t> blocks(count * size_t(n));
    for (size_t j = 0; j < blocks.size(); ++j) blocks[j] = value16(f, rank(), j);
    DeviceBuffer<uint16_t> bin(device_, blocks.size()), bout(device_, count);
    bin.copy_from_host(blocks.data(), blocks.size());
    before = counters_[Traffic::Other];
    comm().reduce_scatter(ConstTensorRef(bin.data(), f), TensorRef(bout.data(), f), count, Traffic::Other);
    expect_bytes((name + " block reduce-scatter").c_str(), before,
                 ring_reduce_scatter_bytes(count * size_t(n), n, rank(), 2));
    const std::vector<uint16_t> mine = bout.to_host();
    for (size_t i = 0; i < count; ++i) {
      auto of_rank = [&](int r) { return value16(f, r, size_t(rank()) * count + i); };
      const uint16_t ring = ring_sum16(f, n, (rank() + 1) % n, of_rank);
      if (!sum16_ok(f, sixteen_value(f, mine[i]), ring, n - 1, of_rank) || (!backend_.nccl && mine[i] != ring)) {
        expect(false, fmt::format("{} block reduce-scatter: element {} is {}", name, i, sixteen_value(f, mine[i])));
        break;
      }
    }
    // The DP group's own halves (--grad-reduce-in-bf16's buckets, the distributed
    // optimizer's parameter all-gather): MPI's ring on host memory, NCCL's on the device.
    const RingChunk own = ring_owned_chunk(count, n, rank());
    before = counters_[Traffic::Other];
    auto reduced = sixteen_on_device_then_back(x, [&](uint16_t* d) {
      if (backend_.nccl) {
        backend_.nccl->reduce_scatter_mean(TensorRef(d, f), count, Traffic::Other);
      } else {
        std::vector<uint16_t> h(count);
        device_copy(h.data(), Device::Cpu, d, device_, count * 2);
        world_.reduce_scatter_sum(TensorRef(h.data(), f), count, Traffic::Other);
        device_copy(d, device_, h.data(), Device::Cpu, count * 2);
      }
    });
    expect_bytes((name + " reduce-scatter").c_str(), before, ring_reduce_scatter_bytes(count, n, rank(), 2));
    for (size_t i = own.lo; i < own.lo + own.len; ++i) {
      auto of_rank = [&](int r) { return value16(f, r, i); };
      // NCCL averages (ncclAvg): its mean scaled back, within one more rounding.
      const double got = double(sixteen_value(f, reduced[i])) * (backend_.nccl ? n : 1);
      const uint16_t ring = ring_sum16(f, n, (rank() + 1) % n, of_rank);
      if (!sum16_ok(f, got, ring, n, of_rank) || (!backend_.nccl && reduced[i] != ring)) {
        expect(false, fmt::format("{} reduce-scatter: owned element {} is {}", name, i, sixteen_value(f, reduced[i])));
        break;
      }
    }
    std::vector<uint16_t> chunks(count, 0);
    for (size_t i = own.lo; i < own.lo + own.len; ++i) chunks[i] = x[i];
    before = counters_[Traffic::Other];
    world_.allgather_chunks(TensorRef(chunks.data(), f), count, Traffic::Other);
    expect_bytes((name + " all-gather of owned chunks").c_str(), before, ring_allgather_chunks_bytes(count, n, rank(), 2));
    for (int c = 0; c < n; ++c) {  // chunk c is rank c - 1's
      const RingChunk ch = ring_chunk(count, n, c);
      for (size_t i = ch.lo; i < ch.lo + ch.len; ++i)
        if (chunks[i] != value16(f, (c - 1 + n) % n, i)) {
          expect(false, fmt::format("{} all-gather of owned chunks: element {} differs from its owner's", name, i));
          c = n;
          break;
        }
    }
  }

  // Median seconds of `iters` all-reduces of `count` floats (after one warm-up),
  // each `gap_s` after the previous one.
  // Median and best seconds.
  std::pair<double, double> time_allreduce(size_t count, int iters, double gap_s) {
    DeviceBuffer<float> d(device_, count);
    comm().allreduce_sum(d.data(), count, Traffic::Other);
    std::vector<double> t;
    for (int k = 0; k < iters; ++k) {
      pause(gap_s);
      MPI_Barrier(world_.handle());
      const double start = now_seconds();
      comm().allreduce_sum(d.data(), count, Traffic::Other);
      double mine = now_seconds() - start, slowest = 0;
      MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, world_.handle());
      t.push_back(slowest);
    }
    std::sort(t.begin(), t.end());
    return {t[t.size() / 2], t.front()};
  }

  // The last rank: the one farthest from rank 0 (on another node where there is one).
  int ping_peer() const { return size() - 1; }
  // Median seconds of `iters` round trips of a `bytes` message from rank 0 to
  // ping_peer() and back (after one warm-up), each `gap_s` after the previous
  // one, through the MPI communicator's point to point (the pipeline's path).
  // Rank 0's median and best; other ranks return zeros.
  std::pair<double, double> time_ping_pong(size_t bytes, int iters, double gap_s) {
    const int peer = ping_peer();
    std::vector<char> out(bytes, 1), in(bytes);
    std::vector<double> t;
    for (int k = 0; k <= iters; ++k) {
      pause(gap_s);
      MPI_Barrier(world_.handle());
      const double start = now_seconds();
      if (rank() == 0) {
        auto recv = world_.irecv(in.data(), bytes, peer, 7201, "a ping-pong reply");
        auto send = world_.isend(out.data(), bytes, peer, 7200, Traffic::Other, "a ping-pong message");
        world_.wait(send);
        world_.wait(recv);
        if (k > 0) t.push_back(now_seconds() - start);
      } else if (rank() == peer) {
        auto recv = world_.irecv(in.data(), bytes, 0, 7200, "a ping-pong message");
        world_.wait(recv);
        auto send = world_.isend(in.data(), bytes, 0, 7201, Traffic::Other, "a ping-pong reply");
        world_.wait(send);
      }
    }
    if (t.empty()) return {0, 0};
    std::sort(t.begin(), t.end());
    return {t[t.size() / 2], t.front()};
  }

  // Rank 0: the host names of rank 0 and of ping_peer() (collective over the world).
  std::pair<std::string, std::string> ping_hosts() {
    char name[MPI_MAX_PROCESSOR_NAME] = {}, peer_name[MPI_MAX_PROCESSOR_NAME] = {};
    int len = 0;
    MPI_Get_processor_name(name, &len);
    if (rank() == ping_peer()) MPI_Send(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, 7202, world_.handle());
    if (rank() == 0) MPI_Recv(peer_name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, ping_peer(), 7202, world_.handle(), MPI_STATUS_IGNORE);
    return {name, peer_name};
  }

 private:
  static void pause(double seconds) {
    if (seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  }

  void scale_on_host(float* d, size_t count, float s) {
    std::vector<float> h(count);
    device_copy(h.data(), Device::Cpu, d, device_, count * sizeof(float));
    for (float& v : h) v *= s;
    device_copy(d, device_, h.data(), Device::Cpu, count * sizeof(float));
  }

  MpiCommunicator& world_;
  Backend& backend_;
  Device device_;
  TrafficCounters& counters_;
  std::string failure_;
  std::vector<size_t> chunk_ends_;
  size_t chunk_ends_count_ = 0;
};

}  // namespace

int comm_check(int argc, char** argv) {
  CLI::App app{"Check the communication library on this machine: every collective and send/receive the engine uses, "
               "across the ranks of mpirun, against known values and the ring's byte counts.",
               "comm-check"};
  std::string backend_name = "auto", device_name;
  size_t count = (1u << 20) + 3;  // not a multiple of the rank count: uneven ring chunks
  int bench_iters = 0;
  double bench_gap_ms = 0;
  size_t ping_bytes = 4096;
  double timeout_s = 60;
  bool debug_host_staging = false;
  app.add_option("--comm-backend", backend_name, "auto | nccl | mpi (auto: NCCL when every rank has its own GPU)");
  app.add_option("--device", device_name, "cpu | cuda (default: cuda when a GPU is visible)");
  // At most 2^29 - 1: the send/receive message stays under MPI's 2 GiB per call.
  app.add_option("--count", count, "floats per rank in each operation")
      ->check(CLI::Range(size_t(1), (size_t(1) << 29) - 1));
  app.add_option("--bench-iters", bench_iters, "also time this many all-reduces of --count floats (median, busbw)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--ping-bytes", ping_bytes,
                 "with --bench-iters (2+ ranks): also time round trips of a message of this many bytes between rank 0 "
                 "and the last rank (default 4096)")
      ->check(CLI::Range(size_t(1), size_t(0x7fffffff)));
  app.add_option("--bench-gap-ms", bench_gap_ms,
                 "pause between timed repetitions (so that a shaped link's token bucket refills and every repetition "
                 "starts alike; default 0)")
      ->check(CLI::Range(0.0, 10000.0));
  app.add_option("--comm-timeout", timeout_s, "seconds a rank waits on the network before aborting the job")
      ->check(CLI::PositiveNumber);
  app.add_flag("--debug-host-staging", debug_host_staging,
               "test only: on the CPU, stage through host copies as a GPU job on MPI does")
      ->group("");  // hidden
  MpiRuntime mpi(argc, argv);
  choose_cuda_module_loading(mpi);
  Device device = Device::Cpu;
  CommBackendChoice choice;
  NodeRanks node;
  int gpus = 0;
  try {
    int rc = -1;
    agree(mpi, [&] {
      rc = parse_command_line(app, argc, argv);
    });
    if (rc >= 0) return rc;
    start_emulated_latency(mpi, "comm-check");
    node = node_ranks(MPI_COMM_WORLD);
    agree(mpi, [&] {
      device = device_name.empty() ? default_device() : parse_device(device_name);
      require_device(device);
      if (device == Device::Cuda) use_cuda_device(gpu_of_local_rank(node.local_rank, cuda_device_count()));
    });
    // Collective: the physical GPUs this node's ranks now use.
    gpus = gpus_in_use_on_node(MPI_COMM_WORLD, device == Device::Cuda ? cuda_device_pci_id() : "");
    agree(mpi, [&] {
      choice = choose_comm_backend(parse_comm_backend(backend_name), device, mpi.size, node.local_size, gpus);
    });
  } catch (const ReportedFailure&) {
    return 1;
  }

  TrafficCounters counters;
  MpiCommunicator world(MPI_COMM_WORLD, counters, timeout_s, "world");
  Backend backend;
  int all_nccl = choice.backend == CommBackend::Nccl;  // one backend for the job, whatever each node has
  MPI_Allreduce(MPI_IN_PLACE, &all_nccl, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all_nccl && choice.backend == CommBackend::Nccl) backend.line = "comm: nccl not on every node; ";
  if (all_nccl) {
    std::string why;
    backend.nccl = NcclCommunicator::create(world, timeout_s, &why);
    if (backend.nccl)
      backend.line = fmt::format("comm: nccl (NCCL {}; {})", nccl_version(nullptr), choice.why);
    else
      backend.line = fmt::format("comm: nccl unavailable ({}); falling back to mpi", why);
  }
  backend.group =
      std::make_unique<DeviceGroup>(world, backend.nccl.get(), device == Device::Cuda || debug_host_staging, device);
  if (!backend.nccl) {
    const std::string how =
        device != Device::Cuda ? std::string(debug_host_staging ? "host-staged on the CPU: --debug-host-staging" : "on the CPU")
                               : "host-staged: " + gpu_sharing(node.local_size, gpus);
    backend.line += fmt::format("{}comm: mpi ({})", backend.line.empty() ? "" : "; ", how);
  }
  if (mpi.rank == 0) std::printf("comm-check: %d rank%s, %s\n", mpi.size, mpi.size == 1 ? "" : "s", backend.line.c_str());
  if (mpi.rank == 0 && backend.nccl && mpi.size > 1)
    if (const std::string modules = cuda_module_loading_line(); !modules.empty()) std::printf("comm-check: %s\n", modules.c_str());

  Checker check(world, backend, device, counters);
  bool links_checked = false;
  try {
    check.check_allreduce(count);
    check.check_reduce_scatter(count);
    check.check_block_reduce_scatter(count);
    check.check_allgather(count);
    check.check_ring_shift(count);
    links_checked = check.check_pipeline_links(count, timeout_s);
    for (Precision f : {Precision::Bf16, Precision::Fp16}) check.check_sixteen_bit(count, f);
  } catch (const std::exception& e) {
    check.expect(false, failure_message(e));
  }
  // The verdict: the lowest failing rank says what failed.
  try {
    agree(mpi, [&] { OCC_CHECK(check.failure().empty(), "comm-check: {}", check.failure()); });
  } catch (const ReportedFailure&) {
    return 1;
  }
  if (mpi.rank == 0)
    std::printf("comm-check: all-reduce (sum, max, mean), reduce-scatter, all-gather and send/receive of %zu floats "
                "per rank: values as expected on every rank, bytes per rank equal to the ring's (all-reduce %llu B, "
                "reduce-scatter %llu B, all-gather %llu B on rank 0)\n",
                count, (unsigned long long)ring_allreduce_bytes(count, mpi.size, 0, sizeof(float)),
                (unsigned long long)ring_reduce_scatter_bytes(count, mpi.size, 0, sizeof(float)),
                (unsigned long long)ring_allgather_bytes(count, mpi.size, sizeof(float)));
  if (mpi.rank == 0)
    std::printf("comm-check: 16-bit wire (bf16, fp16): all-reduce, all-gather, block reduce-scatter, reduce-scatter "
                "and all-gather of owned chunks at 2 bytes per value (all-reduce %llu B on rank 0); gathers exact, "
                "sums %s\n",
                (unsigned long long)ring_allreduce_bytes(count, mpi.size, 0, 2),
                backend.nccl ? "within NCCL's roundings of the exact sum" : "bit for bit the ring's, rounded at every step");
  if (mpi.rank == 0 && links_checked)
    std::printf("comm-check: pipeline links (a ring of %d ranks, one %s group per link and direction): 3 messages "
                "each way queued before any receive, received in order with the values sent\n",
                mpi.size, backend.nccl ? "NCCL" : "MPI");
  if (bench_iters > 0) {
    const auto [t, best] = check.time_allreduce(count, bench_iters, bench_gap_ms / 1e3);
    const double bytes = double(count) * sizeof(float);
    const double algbw = bytes / t / 1e9, busbw = algbw * 2.0 * (mpi.size - 1) / mpi.size;
    if (mpi.rank == 0)
      std::printf("comm-check: all-reduce of %.1f MB: median %.3f ms over %d, algbw %.2f GB/s, busbw %.2f GB/s; "
                  "best %.3f ms\n",
                  bytes / 1e6, t * 1e3, bench_iters, algbw, busbw, best * 1e3);
    if (mpi.size > 1) {
      const auto [rtt, best_rtt] = check.time_ping_pong(ping_bytes, bench_iters, bench_gap_ms / 1e3);
      const auto [host, peer_host] = check.ping_hosts();
      if (mpi.rank == 0)
        std::printf("comm-check: ping-pong of %zu B between rank 0 (%s) and rank %d (%s): median round trip %.3f ms "
                    "over %d; best %.3f ms\n",
                    ping_bytes, host.c_str(), check.ping_peer(), peer_host.c_str(), rtt * 1e3, bench_iters,
                    best_rtt * 1e3);
    }
  }
  return 0;
}

}  // namespace occ::cmd
