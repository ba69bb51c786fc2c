#include "comm/host_staged_communicator.h"

namespace occ {

template <class Op>
void HostStagedCommunicator::staged_in_place(void* data, size_t bytes, Op op) {
  if (bytes == 0) return;
  void* host = reserve_bytes(in_, bytes);
  device_copy(host, Device::Cpu, data, device_, bytes);
  op(host);
  device_copy(data, device_, host, Device::Cpu, bytes);
}

void HostStagedCommunicator::allreduce_sum(TensorRef data, size_t count, Traffic traffic) {
  if (inner_.size() == 1) return;
  staged_in_place(data.data(), count * element_bytes(data.format()),
                  [&](void* host) { inner_.allreduce_sum(TensorRef(host, data.format()), count, traffic); });
}

void HostStagedCommunicator::allreduce_max(float* data, size_t count, Traffic traffic) {
  if (inner_.size() == 1) return;
  staged_in_place(data, count * sizeof(float),
                  [&](void* host) { inner_.allreduce_max(static_cast<float*>(host), count, traffic); });
}

void HostStagedCommunicator::allgather(ConstTensorRef in, TensorRef out, size_t count, Traffic traffic) {
  if (count == 0) return;
  check_same_format(in, out, "all-gather");
  const size_t bytes = count * element_bytes(in.format()), total = bytes * size_t(inner_.size());
  void* host_in = reserve_bytes(in_, bytes);
  void* host_out = reserve_bytes(out_, total);
  device_copy(host_in, Device::Cpu, in.data(), device_, bytes);
  inner_.allgather(ConstTensorRef(host_in, in.format()), TensorRef(host_out, in.format()), count, traffic);
  device_copy(out.data(), device_, host_out, Device::Cpu, total);
}

void HostStagedCommunicator::reduce_scatter(ConstTensorRef in, TensorRef out, size_t count, Traffic traffic) {
  if (count == 0) return;
  check_same_format(in, out, "reduce-scatter");
  const size_t bytes = count * element_bytes(in.format()), total = bytes * size_t(inner_.size());
  void* host_in = reserve_bytes(in_, total);
  void* host_out = reserve_bytes(out_, bytes);
  device_copy(host_in, Device::Cpu, in.data(), device_, total);
  inner_.reduce_scatter(ConstTensorRef(host_in, in.format()), TensorRef(host_out, in.format()), count, traffic);
  device_copy(out.data(), device_, host_out, Device::Cpu, bytes);
}

}  // namespace occ
