#pragma once
// A process group: collective and point-to-point operations over a set of
// ranks, with the bytes this rank puts on the wire counted per traffic class.
// The single-process group (SelfCommunicator) makes every collective a no-op,
// so model code calls the same operations whatever the layout.
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace occ {

enum class Traffic : int { PipelineForward = 0, PipelineBackward, TensorParallel, DataParallel, Embedding, Other, kCount };
const char* traffic_name(Traffic t);  // "pp_fwd", "pp_bwd", "tp", "dp", "emb", "other"

// Bytes this process sent, per class. Atomic: the data-parallel reducer
// thread counts while the main thread sends pipeline messages.
struct TrafficCounters {
  std::array<std::atomic<uint64_t>, size_t(Traffic::kCount)> bytes_sent{};
  // What compression kept off the wire: uncompressed size minus sent size.
  std::array<std::atomic<int64_t>, size_t(Traffic::kCount)> bytes_saved{};
  void add(Traffic t, uint64_t bytes) { bytes_sent[size_t(t)].fetch_add(bytes, std::memory_order_relaxed); }
  void add_saved(Traffic t, int64_t bytes) { bytes_saved[size_t(t)].fetch_add(bytes, std::memory_order_relaxed); }
  uint64_t operator[](Traffic t) const { return bytes_sent[size_t(t)].load(std::memory_order_relaxed); }
  int64_t saved(Traffic t) const { return bytes_saved[size_t(t)].load(std::memory_order_relaxed); }
  void reset() {
    for (auto& b : bytes_sent) b.store(0);
    for (auto& b : bytes_saved) b.store(0);
  }
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In-place element-wise sum / max over the group.
  virtual void allreduce_sum(float* data, size_t count, Traffic traffic) = 0;
  virtual void allreduce_max(float* data, size_t count, Traffic traffic) = 0;
  // out[size * count] = concatenation of every rank's in[count], in rank order.
  virtual void allgather(const float* in, float* out, size_t count, Traffic traffic) = 0;
  // The all-gather's mirror: out[count] = the sum over ranks of their
  // in[rank() * count, (rank() + 1) * count) (sequence parallelism's
  // reduce-scatter after a row-parallel layer). in holds size * count.
  virtual void reduce_scatter(const float* in, float* out, size_t count, Traffic traffic) = 0;
};

class SelfCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void allreduce_sum(float*, size_t, Traffic) override {}
  void allreduce_max(float*, size_t, Traffic) override {}
  void allgather(const float* in, float* out, size_t count, Traffic) override;
  void reduce_scatter(const float* in, float* out, size_t count, Traffic) override;
};

}  // namespace occ
