#include "train/adamw.h"

#include <cmath>

namespace occ {

AdamW::AdamW(const ParamLayout& layout, AdamWConfig cfg, kernels::Ops& ops)
    : cfg_(cfg), ops_(ops), m_(ops.device()), v_(ops.device()), decay_(ops.device()) {
  m_.resize(size_t(layout.total()));
  v_.resize(size_t(layout.total()));
  std::vector<uint8_t> decay(size_t(layout.total()), 0);
  for (const auto& t : layout.tensors())
    if (t.weight_decay)
      for (int64_t i = 0; i < t.numel; ++i) decay[size_t(t.offset + i)] = 1;
  decay_.assign_from_host(decay);
}

void AdamW::update(float* params, const float* grads, float lr, int64_t step) {
  kernels::AdamWStep s{lr, cfg_.beta1, cfg_.beta2, cfg_.eps, cfg_.weight_decay,
                       1.0f / (1.0f - std::pow(cfg_.beta1, float(step))),
                       1.0f / (1.0f - std::pow(cfg_.beta2, float(step)))};
  ops_.adamw_update(params, grads, m_.data(), v_.data(), decay_.data(), int64_t(m_.size()), s);
}

double local_grad_sq_norm(kernels::Ops& ops, const ParamLayout& layout, const float* grads) {
  double total = 0.0;
  for (const auto& t : layout.tensors())
    if (t.counts_in_norm) total += ops.sum_squares(grads + t.offset, t.numel);
  return total;
}

float clip_grads(kernels::Ops& ops, float* grads, int64_t n, double global_norm, float clip) {
  if (clip <= 0.0f) return 1.0f;
  const float coef = float(double(clip) / (global_norm + 1e-6));
  if (coef >= 1.0f) return 1.0f;
  ops.scale(grads, coef, n);
  return coef;
}

}  // namespace occ
