#pragma once
// Collectives on a tensor whose values travel in a given wire format
// (core/wire_format.h): the tensor itself where it is stored in that format
// (a GPU's 16-bit activations on a 16-bit wire), else a copy converted by the
// tensor's backend (to 16 bits: rounded, nearest, ties to even; to fp32:
// widened exactly), collected, and converted back. A group of one rank moves
// nothing and converts nothing.
#include <cstdint>

#include "comm/communicator.h"
#include "core/tensor_buffer.h"
#include "kernels/ops.h"

namespace occ {

// The scratch tensors one caller reuses across calls (on the ops' device).
struct WireScratch {
  explicit WireScratch(Device d) : in(d), out(d) {}
  TensorBuffer in, out;
};

// x[n] summed over the group in place, reduced in `wire` (communicator.h).
void wire_allreduce_sum(Communicator& comm, kernels::Ops& ops, TensorRef x, int64_t n, Precision wire,
                        Traffic traffic, WireScratch& scratch);
// full[size * n] = every rank's local[n], in rank order (full and local may overlap, as in place).
void wire_allgather(Communicator& comm, kernels::Ops& ops, TensorRef full, ConstTensorRef local, int64_t n,
                    Precision wire, Traffic traffic, WireScratch& scratch);
// local[n] = the sum over ranks of their full's block of this rank.
void wire_reduce_scatter(Communicator& comm, kernels::Ops& ops, TensorRef local, ConstTensorRef full, int64_t n,
                         Precision wire, Traffic traffic, WireScratch& scratch);

}  // namespace occ
