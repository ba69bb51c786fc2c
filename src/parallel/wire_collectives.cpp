#include "parallel/wire_collectives.h"

namespace occ {

namespace {
TensorRef sized(TensorBuffer& b, Precision format, int64_t n) {
  b.set_format(format);
  if (b.size() < size_t(n)) b.resize(size_t(n));
  return b.ref();
}
}  // namespace

void wire_allreduce_sum(Communicator& comm, kernels::Ops& ops, TensorRef x, int64_t n, Precision wire,
                        Traffic traffic, WireScratch& scratch) {
  if (n <= 0 || comm.size() == 1) return;
  if (x.format() == wire) {
    comm.allreduce_sum(x, size_t(n), traffic);
    return;
  }
  const TensorRef w = sized(scratch.in, wire, n);
  ops.copy(w, x, n);
  comm.allreduce_sum(w, size_t(n), traffic);
  ops.copy(x, w, n);
}

void wire_allgather(Communicator& comm, kernels::Ops& ops, TensorRef full, ConstTensorRef local, int64_t n,
                    Precision wire, Traffic traffic, WireScratch& scratch) {
  if (n <= 0) return;
  if (comm.size() == 1) {
    ops.copy(full, local, n);
    return;
  }
  if (full.format() == wire && local.format() == wire) {
    comm.allgather(local, full, size_t(n), traffic);
    return;
  }
  const int64_t total = n * comm.size();
  const TensorRef in = sized(scratch.in, wire, n), out = sized(scratch.out, wire, total);
  ops.copy(in, local, n);
  comm.allgather(in, out, size_t(n), traffic);
  ops.copy(full, out, total);
}

void wire_reduce_scatter(Communicator& comm, kernels::Ops& ops, TensorRef local, ConstTensorRef full, int64_t n,
                         Precision wire, Traffic traffic, WireScratch& scratch) {
  if (n <= 0) return;
  if (comm.size() == 1) {
    ops.copy(local, full, n);
    return;
  }
  if (full.format() == wire && local.format() == wire) {
    comm.reduce_scatter(full, local, size_t(n), traffic);
    return;
  }
  const int64_t total = n * comm.size();
  const TensorRef in = sized(scratch.in, wire, total), out = sized(scratch.out, wire, n);
  ops.copy(in, full, total);
  comm.reduce_scatter(in, out, size_t(n), traffic);
  ops.copy(local, out, n);
}

}  // namespace occ
