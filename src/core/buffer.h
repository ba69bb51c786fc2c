#pragma once
// DeviceBuffer<T>: an owned, zero-initialised array on one device. The model,
// optimizer and schedule hold their tensors in these and hand raw pointers
// only to the ops of the same device (kernels/ops.h); host code that needs
// the values (checkpoints, logging, MPI staging) copies them out explicitly.
#include <cstddef>
#include <utility>
#include <vector>

#include "core/device.h"

namespace occ {

template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(Device d = Device::Cpu) : dev_(d) {}
  DeviceBuffer(Device d, size_t n) : dev_(d) { resize(n); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : dev_(o.dev_), ptr_(std::exchange(o.ptr_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      dev_ = o.dev_;
      ptr_ = std::exchange(o.ptr_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }

  // Reallocates (zero-filled) when the size changes; keeps the contents otherwise.
  void resize(size_t n) {
    if (n == n_) return;
    release();
    if (n > 0) ptr_ = static_cast<T*>(device_alloc(dev_, n * sizeof(T)));
    n_ = n;
  }
  // Frees the memory (recomputation drops activations this way).
  void clear() {
    release();
    n_ = 0;
  }
  void zero() {
    if (n_) device_zero(dev_, ptr_, n_ * sizeof(T));
  }

  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  Device device() const { return dev_; }
  bool on_host() const { return dev_ == Device::Cpu; }

  // Copies between host memory and this buffer (count elements from offset).
  void copy_from_host(const T* src, size_t count, size_t offset = 0) {
    device_copy(ptr_ + offset, dev_, src, Device::Cpu, count * sizeof(T));
  }
  void copy_to_host(T* dst, size_t count, size_t offset = 0) const {
    device_copy(dst, Device::Cpu, ptr_ + offset, dev_, count * sizeof(T));
  }
  std::vector<T> to_host() const {
    std::vector<T> v(n_);
    if (n_) copy_to_host(v.data(), n_);
    return v;
  }
  void assign_from_host(const std::vector<T>& v) {
    resize(v.size());
    if (!v.empty()) copy_from_host(v.data(), v.size());
  }

 private:
  void release() {
    if (ptr_) device_free(dev_, ptr_);
    ptr_ = nullptr;
  }
  Device dev_;
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

}  // namespace occ
