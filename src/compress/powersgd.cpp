#include "compress/powersgd.h"

#include <memory>

#include "core/error.h"
#include "core/rng.h"

namespace occ::powersgd {

void init_q(float* q, int64_t m, int64_t k, uint64_t seed, uint64_t key) {
  const uint64_t rng = make_key(seed, 0x505347ull, key);
  for (int64_t i = 0; i < m * k; ++i) q[i] = normal_at(rng, 0, uint64_t(i));
  kernels::cpu_ops().orthonormalize_columns(q, m, k);
}

DeviceBuffer<float> initial_q(Device d, int64_t m, int64_t k, uint64_t seed, uint64_t key) {
  std::vector<float> q(size_t(m * k));
  init_q(q.data(), m, k, seed, key);
  DeviceBuffer<float> on_device(d);
  on_device.assign_from_host(q);
  return on_device;
}

void left_project(kernels::Ops& ops, const float* m, const float* q, float* p, int64_t n, int64_t c, int64_t k) {
  ops.matmul(p, m, q, n, k, c, false, false);
}

void right_project(kernels::Ops& ops, const float* m, const float* p, float* q, int64_t n, int64_t c, int64_t k) {
  ops.matmul(q, m, p, c, k, n, true, false);
}

void reconstruct(kernels::Ops& ops, const float* p, const float* q, float* out, int64_t n, int64_t c, int64_t k) {
  ops.matmul(out, p, q, n, c, k, false, true);
}

}  // namespace occ::powersgd

namespace occ {

PowerSgdCompressor::PowerSgdCompressor(int64_t rows, int64_t cols, int64_t rank, uint64_t seed, uint64_t key,
                                       kernels::Ops& ops)
    : n_(rows), m_(cols), k_(powersgd::effective_rank(rows, cols, rank)), ops_(ops) {
  OCC_CHECK(rank >= 1, "PowerSGD rank must be >= 1 (got {})", rank);
  // Made on the host (the CPU's QR), so both ends of a link start alike on any device.
  q_ = powersgd::initial_q(ops.device(), m_, k_, seed, key);
}

void PowerSgdCompressor::encode(const float* m, float* wire) {
  float* p = wire;            // [n x k]
  float* q = wire + n_ * k_;  // [m x k]
  powersgd::left_project(ops_, m, q_.data(), p, n_, m_, k_);
  ops_.orthonormalize_columns(p, n_, k_);
  powersgd::right_project(ops_, m, p, q, n_, m_, k_);
  ops_.copy(q_.data(), q, m_ * k_);  // warm start of the next call on this link
}

void PowerSgdCompressor::decode(const float* wire, float* out) const {
  powersgd::reconstruct(ops_, wire, wire + n_ * k_, out, n_, m_, k_);
}

void PowerSgdCompressor::save_state(TensorFileWriter& w, const std::string& prefix) const {
  save_device_state(w, prefix + "q", q_, {m_, k_});
}

bool PowerSgdCompressor::load_state(const TensorFileReader& r, const std::string& prefix) {
  // A warm start of another shape (the rank changed) is not usable: start fresh.
  if (!r.has(prefix + "q") || r.shape(prefix + "q") != std::vector<int64_t>{m_, k_}) return false;
  load_device_state(r, prefix + "q", q_);
  return true;
}

}  // namespace occ
