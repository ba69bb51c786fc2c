#pragma once
// ZeRO-1 sharding of one stage's flat parameter buffer over its data-parallel
// group (Megatron's --use-distributed-optimizer). The buffer is covered by
// regions (the gradient buckets, and the tied word embedding where it is
// synchronised apart from them); each region is cut into DP chunks exactly as
// the ring collectives cut it, and this rank owns the chunk that the ring
// reduce-scatter leaves whole on it. So after the buckets are reduce-scattered,
// the owned chunks hold the averaged gradients; the optimizer updates only
// those (its Adam state is the owned chunks' alone), and an all-gather per
// region gives every rank the whole updated parameters -- the same bytes as the
// all-reduce it replaces, moved in two halves.
#include <cstdint>
#include <vector>

#include "comm/mpi_communicator.h"
#include "core/precision.h"

namespace occ {

struct BufferSpan {
  int64_t offset = 0, numel = 0;
};

class OptimizerShards {
 public:
  // regions: disjoint, together the whole buffer (checked against total).
  OptimizerShards(std::vector<BufferSpan> regions, int64_t total, MpiCommunicator& dp);

  // The regions, in buffer order (each all-gathered on its own).
  const std::vector<BufferSpan>& regions() const { return regions_; }
  // This rank's chunk of each region (buffer offsets), in region order.
  const std::vector<BufferSpan>& owned() const { return owned_; }
  int64_t owned_numel() const { return owned_numel_; }

  // Every rank's owned chunks to every rank, in place, region by region, in
  // `wire` format (allgather_owned_chunks).
  void allgather(float* buffer, Traffic traffic, Precision wire = Precision::Fp32) const;
  // compact (owned_numel values, in owned() order) gathered from every rank
  // into the whole state (`total` values), returned where `keep` (empty
  // elsewhere). Region by region, so a rank that does not keep the result
  // holds one region's worth at a time, not the whole state.
  std::vector<float> gather_full(const std::vector<float>& compact, Traffic traffic, bool keep) const;
  // The owned values of a full buffer, in owned() order.
  std::vector<float> take_owned(const std::vector<float>& full) const;

 private:
  std::vector<BufferSpan> regions_, owned_;
  int64_t total_ = 0, owned_numel_ = 0;
  MpiCommunicator& dp_;
  mutable std::vector<uint16_t> wire_;  // a region in 16 bits while it travels
};

// The ring all-gather of the owned chunks (MpiCommunicator::allgather_chunks)
// of region[n] over comm, in `wire` format: fp32 in place; or 16-bit, where
// this rank's owned chunk is rounded to the format for the trip (kept in fp32
// here) and the others arrive as 16-bit values, widened exactly. scratch: n
// 16-bit values' room, reused.
void allgather_owned_chunks(MpiCommunicator& comm, float* region, size_t n, Precision wire,
                            std::vector<uint16_t>& scratch, Traffic traffic);

}  // namespace occ
