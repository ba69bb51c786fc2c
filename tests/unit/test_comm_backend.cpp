// Which library a job communicates with (comm/comm_backend.h), and the ring
// volumes both backends count (comm/ring_volume.h): the bytes MPI's rings
// really send are checked against these by cli.comm_check.
#include <gtest/gtest.h>

#include "comm/comm_backend.h"
#include "comm/node_ranks.h"
#include "comm/ring_volume.h"
#include "core/error.h"

namespace occ {
namespace {

TEST(CommBackend, ParsesTheThreeNamesAndRefusesOthers) {
  EXPECT_EQ(parse_comm_backend("auto"), CommBackend::Auto);
  EXPECT_EQ(parse_comm_backend("nccl"), CommBackend::Nccl);
  EXPECT_EQ(parse_comm_backend("mpi"), CommBackend::Mpi);
  EXPECT_THROW(parse_comm_backend("NCCL"), Error);
  EXPECT_THROW(parse_comm_backend(""), Error);
  for (CommBackend b : {CommBackend::Auto, CommBackend::Mpi, CommBackend::Nccl})
    EXPECT_EQ(parse_comm_backend(comm_backend_name(b)), b);
}

TEST(CommBackend, AutoTakesNcclOnlyWhenEveryRankOfTheNodeHasItsOwnGpu) {
  EXPECT_EQ(choose_comm_backend(CommBackend::Auto, Device::Cuda, 8, 8, 8).backend, CommBackend::Nccl);
  EXPECT_EQ(choose_comm_backend(CommBackend::Auto, Device::Cuda, 16, 4, 8).backend, CommBackend::Nccl);
  const CommBackendChoice shared = choose_comm_backend(CommBackend::Auto, Device::Cuda, 4, 4, 1);
  EXPECT_EQ(shared.backend, CommBackend::Mpi);
  EXPECT_EQ(shared.why, "4 ranks share 1 GPU");
  EXPECT_EQ(choose_comm_backend(CommBackend::Auto, Device::Cuda, 3, 3, 2).why, "3 ranks share 2 GPUs");
  EXPECT_EQ(choose_comm_backend(CommBackend::Auto, Device::Cuda, 1, 1, 1).backend, CommBackend::Mpi);
  EXPECT_EQ(choose_comm_backend(CommBackend::Auto, Device::Cpu, 4, 4, 0).backend, CommBackend::Mpi);
}

// The GPUs a node's ranks use are counted by their PCI addresses, not by how
// many each rank sees: with Slurm's GPU binding every rank sees one GPU (its
// own), and 8 such ranks have 8 GPUs, which auto must give NCCL.
TEST(CommBackend, GpusInUseAreCountedByAddress) {
  const std::vector<std::string> bound{"0000:1b:00.0", "0000:1c:00.0", "0000:9a:00.0", "0000:9b:00.0"};
  EXPECT_EQ(distinct_gpus(bound), 4);
  EXPECT_EQ(choose_comm_backend(CommBackend::Auto, Device::Cuda, 4, 4, distinct_gpus(bound)).backend,
            CommBackend::Nccl);
  const std::vector<std::string> shared(4, "0000:1b:00.0");
  EXPECT_EQ(distinct_gpus(shared), 1);
  EXPECT_EQ(choose_comm_backend(CommBackend::Auto, Device::Cuda, 4, 4, distinct_gpus(shared)).why,
            "4 ranks share 1 GPU");
  EXPECT_EQ(distinct_gpus({"0000:1b:00.0", "0000:1c:00.0", "0000:1b:00.0"}), 2);
  EXPECT_EQ(distinct_gpus({"", ""}), 0);  // ranks without a GPU
}

TEST(CommBackend, ExplicitRequestsWinOnTheGpuAndNcclIsRefusedOnTheCpu) {
  // nccl on shared GPUs is tried (and falls back at run time, with NCCL's reason).
  EXPECT_EQ(choose_comm_backend(CommBackend::Nccl, Device::Cuda, 2, 2, 1).backend, CommBackend::Nccl);
  EXPECT_EQ(choose_comm_backend(CommBackend::Mpi, Device::Cuda, 8, 8, 8).backend, CommBackend::Mpi);
  EXPECT_EQ(choose_comm_backend(CommBackend::Mpi, Device::Cpu, 2, 2, 0).backend, CommBackend::Mpi);
  EXPECT_THROW(choose_comm_backend(CommBackend::Nccl, Device::Cpu, 2, 2, 0), Error);
}

TEST(RingVolume, ChunksTileTheBufferAndEachRankOwnsOne) {
  for (int n : {1, 2, 3, 5, 8})
    for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1000003)}) {
      size_t next = 0;
      for (int c = 0; c < n; ++c) {
        const RingChunk ch = ring_chunk(count, n, c);
        EXPECT_EQ(ch.lo, next);
        next = ch.lo + ch.len;
      }
      EXPECT_EQ(next, count);
      std::vector<int> owners(size_t(n), 0);
      for (int r = 0; r < n; ++r) {
        const RingChunk own = ring_owned_chunk(count, n, r);
        for (int c = 0; c < n; ++c)
          if (ring_chunk(count, n, c).lo == own.lo && ring_chunk(count, n, c).len == own.len) ++owners[size_t(c)];
      }
      if (count >= size_t(n))  // distinct chunks: each owned exactly once
        for (int c = 0; c < n; ++c) EXPECT_EQ(owners[size_t(c)], 1) << "n " << n << " count " << count;
    }
}

TEST(RingVolume, PerRankBytesSumToTheRingsTotals) {
  for (int n : {2, 3, 4, 7})
    for (size_t count : {size_t(1), size_t(10), size_t(1000003)}) {
      uint64_t rs = 0, ag = 0, ar = 0;
      for (int r = 0; r < n; ++r) {
        rs += ring_reduce_scatter_bytes(count, n, r, 4);
        ag += ring_allgather_chunks_bytes(count, n, r, 4);
        ar += ring_allreduce_bytes(count, n, r, 4);
      }
      // Over the ring every chunk leaves n - 1 ranks in each half.
      EXPECT_EQ(rs, uint64_t(n - 1) * count * 4);
      EXPECT_EQ(ag, uint64_t(n - 1) * count * 4);
      EXPECT_EQ(ar, rs + ag);
    }
  EXPECT_EQ(ring_allreduce_bytes(1001, 2, 0, 4), 4004u);  // 2 ranks: 500 + 501 floats
  EXPECT_EQ(ring_reduce_scatter_bytes(1001, 3, 0, 4), 4u * (1001 - 334));  // rank 0 keeps chunk 1 = [333, 667)
  EXPECT_EQ(ring_allgather_bytes(10, 4, 4), 120u);
  EXPECT_EQ(ring_allreduce_bytes(1000, 1, 0, 4), 0u);
  EXPECT_EQ(ring_allgather_bytes(1000, 1, 4), 0u);
}

}  // namespace
}  // namespace occ
