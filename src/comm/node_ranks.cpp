#include "comm/node_ranks.h"

#include <algorithm>
#include <cstring>
#include <set>

namespace occ {

namespace {

// Collective over `comm`: the ranks of this rank's node, in comm's order (free it).
MPI_Comm split_node(MPI_Comm comm) {
  MPI_Comm node;
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  return node;
}

}  // namespace

NodeRanks node_ranks(MPI_Comm comm) {
  MPI_Comm node = split_node(comm);
  NodeRanks r;
  MPI_Comm_rank(node, &r.local_rank);
  MPI_Comm_size(node, &r.local_size);
  MPI_Comm_free(&node);
  return r;
}

int distinct_gpus(const std::vector<std::string>& ids) {
  std::set<std::string> gpus;
  for (const std::string& id : ids)
    if (!id.empty()) gpus.insert(id);
  return int(gpus.size());
}

int gpus_in_use_on_node(MPI_Comm comm, const std::string& gpu_id) {
  constexpr int kIdBytes = 64;  // a PCI address is 13 characters
  MPI_Comm node = split_node(comm);
  int size = 0;
  MPI_Comm_size(node, &size);
  char mine[kIdBytes] = {};
  std::memcpy(mine, gpu_id.data(), std::min(gpu_id.size(), size_t(kIdBytes - 1)));
  std::vector<char> all(size_t(size) * kIdBytes);
  MPI_Allgather(mine, kIdBytes, MPI_CHAR, all.data(), kIdBytes, MPI_CHAR, node);
  MPI_Comm_free(&node);
  std::vector<std::string> ids;
  for (int i = 0; i < size; ++i) ids.emplace_back(all.data() + size_t(i) * kIdBytes);
  return distinct_gpus(ids);
}

}  // namespace occ
