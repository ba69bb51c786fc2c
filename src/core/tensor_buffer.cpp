#include "core/tensor_buffer.h"

#include <cstring>

#include "core/error.h"

namespace occ {

void fail_tensor_format(Precision format) {
  fail("internal: a {} tensor reached code that reads fp32 values (the CPU backend stores every tensor in fp32)",
       precision_name(format));
}

std::vector<float> TensorBuffer::values_to_host(ConstTensorRef src, size_t n, Device d) {
  std::vector<float> out(n);
  if (n == 0) return out;
  if (src.is_fp32()) {
    device_copy(out.data(), Device::Cpu, src.data(), d, n * sizeof(float));
    return out;
  }
  std::vector<uint16_t> bits(n);
  device_copy(bits.data(), Device::Cpu, src.data(), d, n * sizeof(uint16_t));
  for (size_t i = 0; i < n; ++i) out[i] = sixteen_value(src.format(), bits[i]);
  return out;
}

void TensorBuffer::assign_from_host_f32(const std::vector<float>& v) {
  resize(v.size());
  if (v.empty()) return;
  if (format_ == Precision::Fp32) {
    device_copy(bytes_.data(), device(), v.data(), Device::Cpu, v.size() * sizeof(float));
    return;
  }
  std::vector<uint16_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) bits[i] = sixteen_bits(format_, v[i]);
  device_copy(bytes_.data(), device(), bits.data(), Device::Cpu, bits.size() * sizeof(uint16_t));
}

}  // namespace occ
