#include "train/adamw.h"

#include <cmath>

namespace occ {

AdamW::AdamW(const ParamLayout& layout, AdamWConfig cfg) : cfg_(cfg) {
  m_.assign(size_t(layout.total()), 0.0f);
  v_.assign(size_t(layout.total()), 0.0f);
  decay_.assign(size_t(layout.total()), 0);
  for (const auto& t : layout.tensors())
    if (t.weight_decay)
      for (int64_t i = 0; i < t.numel; ++i) decay_[size_t(t.offset + i)] = 1;
}

void AdamW::update(float* params, const float* grads, float lr, int64_t step) {
  const float b1 = cfg_.beta1, b2 = cfg_.beta2, eps = cfg_.eps, wd = cfg_.weight_decay;
  const float c1 = 1.0f / (1.0f - std::pow(b1, float(step)));
  const float c2 = 1.0f / (1.0f - std::pow(b2, float(step)));
  const int64_t n = int64_t(m_.size());
  float* m = m_.data();
  float* v = v_.data();
  const uint8_t* decay = decay_.data();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grads[i];
    m[i] = b1 * m[i] + (1.0f - b1) * g;
    v[i] = b2 * v[i] + (1.0f - b2) * g * g;
    const float update = (m[i] * c1) / (std::sqrt(v[i] * c2) + eps);
    // Decoupled weight decay (AdamW), as torch.optim.AdamW: p *= 1 - lr*wd.
    const float p = decay[i] ? params[i] * (1.0f - lr * wd) : params[i];
    params[i] = p - lr * update;
  }
}

double local_grad_sq_norm(const ParamLayout& layout, const float* grads) {
  double total = 0.0;
  for (const auto& t : layout.tensors()) {
    if (!t.counts_in_norm) continue;
    double s = 0.0;
    const float* g = grads + t.offset;
#pragma omp parallel for simd reduction(+ : s) schedule(static)
    for (int64_t i = 0; i < t.numel; ++i) s += double(g[i]) * double(g[i]);
    total += s;
  }
  return total;
}

float clip_grads(float* grads, int64_t n, double global_norm, float clip) {
  if (clip <= 0.0f) return 1.0f;
  const float coef = float(double(clip) / (global_norm + 1e-6));
  if (coef >= 1.0f) return 1.0f;
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) grads[i] *= coef;
  return coef;
}

}  // namespace occ
