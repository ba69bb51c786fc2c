#pragma once
// A communicator for data in device memory over one that moves host memory
// (MPI): each collective copies its operands into page-locked host buffers,
// runs there and copies the result back. This is how ranks that share a GPU
// talk (NCCL refuses two ranks on one GPU), and on the CPU with
// --debug-host-staging it runs the same copies so the path is tested without
// a GPU. Bytes on the wire are the inner communicator's, counted by it.
#include <memory>

#include "comm/communicator.h"
#include "core/device.h"
#include "core/host_staging.h"

namespace occ {

class HostStagedCommunicator final : public Communicator {
 public:
  // `inner` must outlive this object; `device`: where the callers' data lives.
  HostStagedCommunicator(Communicator& inner, Device device) : inner_(inner), device_(device) {}

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  void allreduce_sum(TensorRef data, size_t count, Traffic traffic) override;
  void allreduce_max(float* data, size_t count, Traffic traffic) override;
  void allgather(ConstTensorRef in, TensorRef out, size_t count, Traffic traffic) override;
  void reduce_scatter(ConstTensorRef in, TensorRef out, size_t count, Traffic traffic) override;

 private:
  // op(host copy) on `bytes` bytes of data, in place.
  template <class Op>
  void staged_in_place(void* data, size_t bytes, Op op);
  // A pinned buffer of at least `bytes` bytes.
  static void* reserve_bytes(PinnedBuffer& b, size_t bytes) {
    b.reserve((bytes + sizeof(float) - 1) / sizeof(float));
    return b.data();
  }

  Communicator& inner_;
  Device device_;
  PinnedBuffer in_, out_;
};

// A group's communicator for data on `device`: NCCL's where it formed (non-null
// `nccl`), else the MPI group through host copies when `staged`, else the MPI
// group itself (the CPU). `mpi` and `nccl` must outlive it.
class DeviceGroup {
 public:
  DeviceGroup(Communicator& mpi, Communicator* nccl, bool staged, Device device)
      : staged_(!nccl && staged ? std::make_unique<HostStagedCommunicator>(mpi, device) : nullptr),
        comm_(nccl ? nccl : staged_ ? staged_.get() : &mpi) {}
  Communicator& comm() const { return *comm_; }

 private:
  std::unique_ptr<HostStagedCommunicator> staged_;
  Communicator* comm_;
};

}  // namespace occ
