#pragma once
// TensorBuffer: an owned, zero-initialised array of values of one format
// (core/tensor_ref.h) on one device. The model keeps a step's activations in
// these: fp32 on the CPU (rounded to the training precision by the step),
// 16-bit on a GPU running --bf16 / --fp16.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/buffer.h"
#include "core/tensor_ref.h"

namespace occ {

class TensorBuffer {
 public:
  explicit TensorBuffer(Device d = Device::Cpu, Precision format = Precision::Fp32) : bytes_(d), format_(format) {}
  TensorBuffer(Device d, Precision format, size_t n) : TensorBuffer(d, format) { resize(n); }

  // Reallocates (zero-filled) when the size changes; keeps the contents otherwise.
  void resize(size_t n) {
    bytes_.resize(n * element_bytes(format_));
    n_ = n;
  }
  // Another format: the values are dropped (zero-filled at the same count).
  void set_format(Precision format) {
    if (format == format_) return;
    const size_t n = n_;
    bytes_.clear();
    format_ = format;
    resize(n);
  }
  void clear() {
    bytes_.clear();
    n_ = 0;
  }
  void zero() { bytes_.zero(); }

  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  Device device() const { return bytes_.device(); }
  Precision format() const { return format_; }
  size_t bytes() const { return bytes_.size(); }

  TensorRef ref() { return {bytes_.data(), format_}; }
  ConstTensorRef ref() const { return {bytes_.data(), format_}; }
  // The values as fp32 (an fp32 buffer only: an internal error otherwise).
  float* f32() { return ref().f32(); }
  const float* f32() const { return ref().f32(); }

  // Host copies as fp32 values (16-bit values widen exactly) and back (rounded
  // to the format, ties to even).
  std::vector<float> to_host_f32() const { return values_to_host(ref(), n_, device()); }
  void assign_from_host_f32(const std::vector<float>& v);

  // n values at `src` on device `d`, as fp32 on the host.
  static std::vector<float> values_to_host(ConstTensorRef src, size_t n, Device d);

 private:
  DeviceBuffer<uint8_t> bytes_;
  Precision format_;
  size_t n_ = 0;
};

}  // namespace occ
