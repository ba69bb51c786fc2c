#pragma once
// The bytes one rank puts on the wire in the ring collectives, and the chunks
// they split a buffer into. MpiCommunicator's rings send exactly this (its
// counters are checked against these functions by `optimus-cc comm-check`);
// NcclCommunicator counts the same per-rank volume for its collectives (the
// volume of NCCL's ring algorithm), so a job's byte counters per traffic class
// are the same whichever library moved the data.
#include <cstddef>
#include <cstdint>

namespace occ {

struct RingChunk {
  size_t lo = 0, len = 0;
};

// Chunk c of `count` elements split over `size` ranks: [count * c / size, count * (c + 1) / size).
inline RingChunk ring_chunk(size_t count, int size, int c) {
  const size_t lo = count * size_t(c) / size_t(size), hi = count * size_t(c + 1) / size_t(size);
  return {lo, hi - lo};
}

// The chunk whose whole sum rank `rank` holds after a ring reduce-scatter.
inline RingChunk ring_owned_chunk(size_t count, int size, int rank) { return ring_chunk(count, size, (rank + 1) % size); }

// Ring reduce-scatter: every chunk but the owned one leaves this rank once.
inline uint64_t ring_reduce_scatter_bytes(size_t count, int size, int rank, size_t elem_bytes) {
  if (size <= 1 || count == 0) return 0;
  return uint64_t(count - ring_owned_chunk(count, size, rank).len) * elem_bytes;
}

// Ring all-gather of the owned chunks: every chunk but the right neighbour's owned one.
inline uint64_t ring_allgather_chunks_bytes(size_t count, int size, int rank, size_t elem_bytes) {
  if (size <= 1 || count == 0) return 0;
  return uint64_t(count - ring_chunk(count, size, (rank + 2) % size).len) * elem_bytes;
}

inline uint64_t ring_allreduce_bytes(size_t count, int size, int rank, size_t elem_bytes) {
  return ring_reduce_scatter_bytes(count, size, rank, elem_bytes) +
         ring_allgather_chunks_bytes(count, size, rank, elem_bytes);
}

// All-gather of `count` elements per rank: size - 1 blocks leave each rank.
inline uint64_t ring_allgather_bytes(size_t count, int size, size_t elem_bytes) {
  return size <= 1 ? 0 : uint64_t(size - 1) * count * elem_bytes;
}

}  // namespace occ
