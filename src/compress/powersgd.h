#pragma once
// PowerSGD (Vogels et al., NeurIPS 2019): one power-iteration step of rank r.
//   P = M Q ; P = orthonormalise(P) ; Q = M^T P ; M_hat = P Q^T
// Q is warm-started from the previous call and initialised from a Gaussian
// keyed by (seed, key), so every rank that must agree on it does.
#include <memory>
#include <vector>

#include "compress/compressor.h"
#include "core/buffer.h"
#include "kernels/ops.h"

namespace occ::powersgd {

// Effective rank: at most min(rows, cols), so that r >= min(rows, cols) is lossless.
inline int64_t effective_rank(int64_t rows, int64_t cols, int64_t rank) {
  int64_t k = rank < rows ? rank : rows;
  return k < cols ? k : cols;
}
// q[m x k] = orthonormalised Gaussian keyed by (seed, key), in host memory
// (the CPU's QR: every rank and backend starts from the same Q).
void init_q(float* q, int64_t m, int64_t k, uint64_t seed, uint64_t key);
// The same Q, made on the host and copied to device `d`.
DeviceBuffer<float> initial_q(Device d, int64_t m, int64_t k, uint64_t seed, uint64_t key);
// The three products of a power-iteration step, on `ops`' device (fp32, kernels/ops.h):
// p[n x k] = m[n x c] q[c x k]
void left_project(kernels::Ops& ops, const float* m, const float* q, float* p, int64_t n, int64_t c, int64_t k);
// q[c x k] = m[n x c]^T p[n x k]
void right_project(kernels::Ops& ops, const float* m, const float* p, float* q, int64_t n, int64_t c, int64_t k);
// out[n x c] = p[n x k] q[c x k]^T
void reconstruct(kernels::Ops& ops, const float* p, const float* q, float* out, int64_t n, int64_t c, int64_t k);

}  // namespace occ::powersgd

namespace occ {

// PowerSGD on one point-to-point link: the sender encodes [P | Q] as one
// message, the receiver rebuilds P Q^T. Runs on `ops`' device (the GPU's
// cuBLAS products and Gram-Schmidt, or the CPU's), which holds the warm start.
class PowerSgdCompressor final : public MatrixCompressor {
 public:
  PowerSgdCompressor(int64_t rows, int64_t cols, int64_t rank, uint64_t seed, uint64_t key,
                     kernels::Ops& ops = kernels::cpu_ops());
  int64_t rows() const override { return n_; }
  int64_t cols() const override { return m_; }
  int64_t rank() const { return k_; }
  int64_t wire_floats() const override { return k_ * (n_ + m_); }
  void encode(const float* m, float* wire) override;
  void decode(const float* wire, float* out) const override;
  void save_state(TensorFileWriter& w, const std::string& prefix) const override;
  bool load_state(const TensorFileReader& r, const std::string& prefix) override;
  std::vector<float> q() const { return q_.to_host(); }

 private:
  int64_t n_, m_, k_;
  kernels::Ops& ops_;
  DeviceBuffer<float> q_;  // warm start [m x k]
};

}  // namespace occ
