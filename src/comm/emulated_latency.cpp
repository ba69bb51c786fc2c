#include "comm/emulated_latency.h"

#include <cstdlib>
#include <set>
#include <vector>

namespace occ {

namespace {

struct State {
  std::chrono::nanoseconds delay{0};
  std::vector<int> node_of_world_rank;  // the lowest world rank of each rank's node
};
State& state() {
  static State s;
  return s;
}

}  // namespace

std::chrono::nanoseconds emulated_latency_from_env() {
  const char* value = std::getenv(kEmulatedLatencyVariable);
  if (!value || !*value) return std::chrono::nanoseconds(0);
  return parse_latency(value, kEmulatedLatencyVariable);
}

int configure_emulated_latency(MPI_Comm world, std::chrono::nanoseconds delay) {
  int rank = 0, size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  MPI_Comm node;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int first = rank;
  MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, node);
  MPI_Comm_free(&node);
  State& s = state();
  s.node_of_world_rank.assign(size_t(size), 0);
  MPI_Allgather(&first, 1, MPI_INT, s.node_of_world_rank.data(), 1, MPI_INT, world);
  const int nodes = int(std::set<int>(s.node_of_world_rank.begin(), s.node_of_world_rank.end()).size());
  s.delay = nodes > 1 ? delay : std::chrono::nanoseconds(0);  // one node: nothing to delay, NCCL may form
  return nodes;
}

std::chrono::nanoseconds emulated_latency() { return state().delay; }

bool on_different_nodes(int a, int b) {
  const State& s = state();
  if (s.delay.count() == 0 || a < 0 || b < 0 || size_t(a) >= s.node_of_world_rank.size() ||
      size_t(b) >= s.node_of_world_rank.size())
    return false;
  return s.node_of_world_rank[size_t(a)] != s.node_of_world_rank[size_t(b)];
}

DelayLine& emulated_latency_line() {
  // Never destroyed: its thread is ended by stop_emulated_latency() before MPI_Finalize.
  static DelayLine* line = new DelayLine;
  return *line;
}

void stop_emulated_latency() {
  if (state().delay.count() > 0) emulated_latency_line().stop();
}

}  // namespace occ
