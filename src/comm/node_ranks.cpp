#include "comm/node_ranks.h"

namespace occ {

NodeRanks node_ranks(MPI_Comm comm) {
  MPI_Comm node;
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  NodeRanks r;
  MPI_Comm_rank(node, &r.local_rank);
  MPI_Comm_size(node, &r.local_size);
  MPI_Comm_free(&node);
  return r;
}

}  // namespace occ
