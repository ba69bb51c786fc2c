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

PowerSgdCompressor::PowerSgdCompressor(int64_t rows, int64_t cols, int64_t rank, uint64_t seed, uint64_t key)
    : n_(rows), m_(cols), k_(powersgd::effective_rank(rows, cols, rank)) {
  OCC_CHECK(rank >= 1, "PowerSGD rank must be >= 1 (got {})", rank);
  q_.resize(size_t(m_ * k_));
  powersgd::init_q(q_.data(), m_, k_, seed, key);
}

void PowerSgdCompressor::encode(const float* m, float* wire) {
  float* p = wire;            // [n x k]
  float* q = wire + n_ * k_;  // [m x k]
  // A point-to-point link's message is in host memory (the pipeline's transfers are).
  kernels::Ops& ops = kernels::cpu_ops();
  powersgd::left_project(ops, m, q_.data(), p, n_, m_, k_);
  ops.orthonormalize_columns(p, n_, k_);
  powersgd::right_project(ops, m, p, q, n_, m_, k_);
  q_.assign(q, q + m_ * k_);  // warm start of the next call on this link
}

void PowerSgdCompressor::decode(const float* wire, float* out) const {
  powersgd::reconstruct(kernels::cpu_ops(), wire, wire + n_ * k_, out, n_, m_, k_);
}

void PowerSgdCompressor::save_state(TensorFileWriter& w, const std::string& prefix) const {
  w.add(prefix + "q", q_.data(), {m_, k_});
}

bool PowerSgdCompressor::load_state(const TensorFileReader& r, const std::string& prefix) {
  // A warm start of another shape (the rank changed) is not usable: start fresh.
  if (!r.has(prefix + "q") || r.shape(prefix + "q") != std::vector<int64_t>{m_, k_}) return false;
  r.read(prefix + "q", q_.data(), m_ * k_);
  return true;
}

ErrorFeedback::ErrorFeedback(std::unique_ptr<MatrixCompressor> inner) : inner_(std::move(inner)) {
  const size_t n = size_t(inner_->rows() * inner_->cols());
  error_.assign(n, 0.0f);
  corrected_.resize(n);
  decoded_.resize(n);
}

void ErrorFeedback::encode(const float* m, float* wire) {
  const size_t n = error_.size();
  for (size_t i = 0; i < n; ++i) corrected_[i] = m[i] + error_[i];
  inner_->encode(corrected_.data(), wire);
  inner_->decode(wire, decoded_.data());
  for (size_t i = 0; i < n; ++i) error_[i] = corrected_[i] - decoded_[i];
}

void ErrorFeedback::save_state(TensorFileWriter& w, const std::string& prefix) const {
  inner_->save_state(w, prefix);
  w.add(prefix + "error", error_.data(), {inner_->rows(), inner_->cols()});
}

bool ErrorFeedback::load_state(const TensorFileReader& r, const std::string& prefix) {
  bool complete = inner_->load_state(r, prefix);
  if (r.has(prefix + "error") && r.numel(prefix + "error") == int64_t(error_.size()))
    r.read(prefix + "error", error_.data(), int64_t(error_.size()));
  else
    complete = false;
  return complete;
}

}  // namespace occ
