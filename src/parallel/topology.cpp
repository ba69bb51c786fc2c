#include "parallel/topology.h"

namespace occ {

namespace {
MPI_Comm split(int color, int key) {
  MPI_Comm c;
  MPI_Comm_split(MPI_COMM_WORLD, color, key, &c);
  return c;
}
}  // namespace

std::unique_ptr<Topology> Topology::create(int tp_size, int pp_size, double timeout_s) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  auto t = std::make_unique<Topology>();
  t->layout = ParallelLayout::from_rank(rank, world, tp_size, pp_size);
  const ParallelLayout& l = t->layout;
  auto make = [&](MPI_Comm c, const char* name) {
    return std::make_unique<MpiCommunicator>(c, t->counters, timeout_s, name);
  };
  t->world = make(MPI_COMM_WORLD, "world");
  t->tp = make(split(l.pp_rank * l.dp_size + l.dp_rank, l.tp_rank), "tensor-parallel");
  t->dp = make(split(l.pp_rank * l.tp_size + l.tp_rank, l.dp_rank), "data-parallel");
  MPI_Comm dup;
  MPI_Comm_dup(t->dp->handle(), &dup);
  t->dp_async = make(dup, "data-parallel");
  t->pp = make(split(l.dp_rank * l.tp_size + l.tp_rank, l.pp_rank), "pipeline");
  t->model = make(split(l.dp_rank, l.pp_rank * l.tp_size + l.tp_rank), "model-parallel");
  // Every rank takes part in the split; ranks outside {first, last} stage get MPI_COMM_NULL.
  const bool in_embedding = l.pp_size > 1 && (l.first_stage() || l.last_stage());
  MPI_Comm emb = split(in_embedding ? l.dp_rank * l.tp_size + l.tp_rank : MPI_UNDEFINED, l.pp_rank);
  if (in_embedding) t->embedding = make(emb, "embedding");
  // FE: one group per TP rank (the prototype's single group over all TP ranks
  // would add different vocabulary shards together when T > 1).
  const bool holds_embedding = l.first_stage() || l.last_stage();
  MPI_Comm fe = split(holds_embedding ? l.tp_rank : MPI_UNDEFINED, l.pp_rank * l.dp_size + l.dp_rank);
  if (holds_embedding) t->fused_embedding = make(fe, "fused-embedding");
  return t;
}

}  // namespace occ
