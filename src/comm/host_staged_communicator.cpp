#include "comm/host_staged_communicator.h"

namespace occ {

template <class Op>
void HostStagedCommunicator::staged_in_place(float* data, size_t count, Op op) {
  if (count == 0) return;
  in_.reserve(count);
  device_copy(in_.data(), Device::Cpu, data, device_, count * sizeof(float));
  op(in_.data());
  device_copy(data, device_, in_.data(), Device::Cpu, count * sizeof(float));
}

void HostStagedCommunicator::allreduce_sum(float* data, size_t count, Traffic traffic) {
  if (inner_.size() == 1) return;
  staged_in_place(data, count, [&](float* host) { inner_.allreduce_sum(host, count, traffic); });
}

void HostStagedCommunicator::allreduce_max(float* data, size_t count, Traffic traffic) {
  if (inner_.size() == 1) return;
  staged_in_place(data, count, [&](float* host) { inner_.allreduce_max(host, count, traffic); });
}

void HostStagedCommunicator::allgather(const float* in, float* out, size_t count, Traffic traffic) {
  if (count == 0) return;
  const size_t total = count * size_t(inner_.size());
  in_.reserve(count);
  out_.reserve(total);
  device_copy(in_.data(), Device::Cpu, in, device_, count * sizeof(float));
  inner_.allgather(in_.data(), out_.data(), count, traffic);
  device_copy(out, device_, out_.data(), Device::Cpu, total * sizeof(float));
}

void HostStagedCommunicator::reduce_scatter(const float* in, float* out, size_t count, Traffic traffic) {
  if (count == 0) return;
  const size_t total = count * size_t(inner_.size());
  in_.reserve(total);
  out_.reserve(count);
  device_copy(in_.data(), Device::Cpu, in, device_, total * sizeof(float));
  inner_.reduce_scatter(in_.data(), out_.data(), count, traffic);
  device_copy(out, device_, out_.data(), Device::Cpu, count * sizeof(float));
}

}  // namespace occ
