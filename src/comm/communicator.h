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

#include "core/tensor_ref.h"

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

// Values travel in the format of the buffers a collective is given (core/
// tensor_ref.h; a float* is an fp32 one): 4 bytes per fp32 value, 2 per bf16
// or fp16 value, and the byte counters count exactly that. A 16-bit sum is
// reduced in the format, as NCCL reduces bf16: each step of the ring widens
// the partial sum it holds and the one it receives, adds them in fp32 and
// rounds the result to the format (nearest, ties to even) before it goes on,
// so a sum over S ranks is rounded S - 1 times (once for S = 2: then it equals
// the fp32 sum rounded once, bit for bit). Every rank ends with the same bits.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In-place element-wise sum over the group, in data's format.
  virtual void allreduce_sum(TensorRef data, size_t count, Traffic traffic) = 0;
  // In-place element-wise max (fp32 statistics).
  virtual void allreduce_max(float* data, size_t count, Traffic traffic) = 0;
  // out[size * count] = concatenation of every rank's in[count], in rank order
  // (in and out of one format).
  virtual void allgather(ConstTensorRef in, TensorRef out, size_t count, Traffic traffic) = 0;
  // The all-gather's mirror: out[count] = the sum over ranks of their
  // in[rank() * count, (rank() + 1) * count) (sequence parallelism's
  // reduce-scatter after a row-parallel layer). in holds size * count; in
  // and out of one format.
  virtual void reduce_scatter(ConstTensorRef in, TensorRef out, size_t count, Traffic traffic) = 0;
};

// Internal check of a collective's operands: one format (the wire's).
void check_same_format(ConstTensorRef a, ConstTensorRef b, const char* op);

class SelfCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void allreduce_sum(TensorRef, size_t, Traffic) override {}
  void allreduce_max(float*, size_t, Traffic) override {}
  void allgather(ConstTensorRef in, TensorRef out, size_t count, Traffic) override;
  void reduce_scatter(ConstTensorRef in, TensorRef out, size_t count, Traffic) override;
};

}  // namespace occ
