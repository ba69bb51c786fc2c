#pragma once
// Host memory between device buffers and the parts of the engine that work on
// the host: MPI and the compressors. On the CPU the host view of a buffer is
// the buffer itself. Staged (a GPU; or the CPU with --debug-host-staging, which
// runs this path where no GPU is), it is a separate page-locked copy, filled
// and written back explicitly, range by range. Copies run in order with the
// GPU's kernels (core/device.h: the legacy default stream), so a download
// waits for the kernels that produce the values; or on a CopyQueue after a
// DeviceMark, waiting for the kernels before the mark only.
#include <cstddef>

#include "core/device.h"

namespace occ {

// Owned page-locked host floats (core/device.h pinned_host_alloc), zero-filled.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() { pinned_host_free(ptr_); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  // At least n floats; the contents are not kept when it grows.
  void reserve(size_t n) {
    if (n <= n_) return;
    pinned_host_free(ptr_);
    ptr_ = nullptr;
    n_ = 0;
    ptr_ = static_cast<float*>(pinned_host_alloc(n * sizeof(float)));
    n_ = n;
  }
  float* data() { return ptr_; }

 private:
  float* ptr_ = nullptr;
  size_t n_ = 0;
};

// The host view of one device buffer of fixed place and size.
class HostMirror {
 public:
  // staged = false: host() is `data` itself, which must then be host memory.
  HostMirror(Device device, float* data, size_t size, bool staged)
      : device_(device), data_(data), size_(size), staged_(staged) {
    if (staged_) copy_.reserve(size_);
  }
  bool staged() const { return staged_; }
  Device device() const { return device_; }
  float* host() { return staged_ ? copy_.data() : data_; }
  float* device_data() { return data_; }  // the buffer itself (for NCCL, which moves device memory)
  // Device -> host view of [offset, offset + count) (nothing to do unstaged).
  void download(size_t offset, size_t count) {
    if (staged_ && count) device_copy(copy_.data() + offset, Device::Cpu, data_ + offset, device_, count * sizeof(float));
  }
  // Host view -> device.
  void upload(size_t offset, size_t count) {
    if (staged_ && count) device_copy(data_ + offset, device_, copy_.data() + offset, Device::Cpu, count * sizeof(float));
  }
  // The same on another thread's `queue`, beside the compute: the download
  // waits only for the work before `ready`. Both return when the copy is done.
  void download(size_t offset, size_t count, CopyQueue& queue, const DeviceMark& ready) {
    if (!staged_ || !count) return;
    queue.wait_for(ready);
    queue.copy(copy_.data() + offset, Device::Cpu, data_ + offset, device_, count * sizeof(float));
    queue.synchronize();
  }
  void upload(size_t offset, size_t count, CopyQueue& queue) {
    if (!staged_ || !count) return;
    queue.copy(data_ + offset, device_, copy_.data() + offset, Device::Cpu, count * sizeof(float));
    queue.synchronize();
  }
  void download_all() { download(0, size_); }
  void upload_all() { upload(0, size_); }

 private:
  Device device_;
  float* data_;
  size_t size_;
  bool staged_;
  PinnedBuffer copy_;
};

}  // namespace occ
