#include "compress/host_staged_compressor.h"

namespace occ {

HostStagedCompressor::HostStagedCompressor(std::unique_ptr<MatrixCompressor> inner, Device device)
    : inner_(std::move(inner)), device_(device) {
  matrix_.reserve(size_t(inner_->rows() * inner_->cols()));
}

void HostStagedCompressor::encode(const float* m, float* wire) {
  const size_t n = size_t(rows() * cols());
  device_copy(matrix_.data(), Device::Cpu, m, device_, n * sizeof(float));
  inner_->encode(matrix_.data(), wire);
}

void HostStagedCompressor::decode(const float* wire, float* out) const {
  const size_t n = size_t(rows() * cols());
  inner_->decode(wire, matrix_.data());
  device_copy(out, device_, matrix_.data(), Device::Cpu, n * sizeof(float));
}

}  // namespace occ
