#include "train/adamw.h"

#include <algorithm>
#include <cmath>

namespace occ {

AdamW::AdamW(const ParamLayout& layout, AdamWConfig cfg, kernels::Ops& ops, std::vector<BufferSpan> owned)
    : cfg_(cfg), ops_(ops), owned_(std::move(owned)), m_(ops.device()), v_(ops.device()), decay_(ops.device()) {
  if (owned_.empty()) owned_.push_back({0, layout.total()});
  std::vector<uint8_t> full(size_t(layout.total()), 0);
  for (const auto& t : layout.tensors())
    if (t.weight_decay)
      for (int64_t i = 0; i < t.numel; ++i) full[size_t(t.offset + i)] = 1;
  std::vector<uint8_t> decay;
  for (const BufferSpan& s : owned_) decay.insert(decay.end(), full.begin() + s.offset, full.begin() + s.offset + s.numel);
  m_.resize(decay.size());
  v_.resize(decay.size());
  decay_.assign_from_host(decay);
}

void AdamW::update(float* params, const float* grads, float lr, int64_t step) {
  kernels::AdamWStep s{lr, cfg_.beta1, cfg_.beta2, cfg_.eps, cfg_.weight_decay,
                       1.0f / (1.0f - std::pow(cfg_.beta1, float(step))),
                       1.0f / (1.0f - std::pow(cfg_.beta2, float(step)))};
  int64_t at = 0;  // position in the moments
  for (const BufferSpan& span : owned_) {
    ops_.adamw_update(params + span.offset, grads + span.offset, m_.data() + at, v_.data() + at, decay_.data() + at,
                      span.numel, s);
    at += span.numel;
  }
}

double local_grad_sq_norm(kernels::Ops& ops, const ParamLayout& layout, const float* grads,
                          const std::vector<BufferSpan>* spans) {
  // Every counted tensor (or its part inside each owned span), summed in one
  // pass on the device: one reduction and one wait per iteration.
  std::vector<kernels::Span> parts;
  for (const auto& t : layout.tensors()) {
    if (!t.counts_in_norm) continue;
    if (!spans) {
      parts.push_back({t.offset, t.numel});
      continue;
    }
    for (const BufferSpan& s : *spans) {  // the tensor's part inside each span
      const int64_t lo = std::max(t.offset, s.offset), hi = std::min(t.offset + t.numel, s.offset + s.numel);
      if (lo < hi) parts.push_back({lo, hi - lo});
    }
  }
  return ops.sum_squares_spans(grads, parts.data(), int64_t(parts.size()));
}

float clip_grads(kernels::Ops& ops, float* grads, int64_t n, double global_norm, float clip) {
  if (clip <= 0.0f) return 1.0f;
  const float coef = float(double(clip) / (global_norm + 1e-6));
  if (coef >= 1.0f) return 1.0f;
  ops.scale(grads, coef, n);
  return coef;
}

}  // namespace occ
