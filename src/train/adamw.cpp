#include "train/adamw.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace occ {

namespace {
// The part of [offset, offset + numel) inside span s (numel <= 0: none).
BufferSpan part_inside(const BufferSpan& s, int64_t offset, int64_t numel) {
  const int64_t lo = std::max(offset, s.offset), hi = std::min(offset + numel, s.offset + s.numel);
  return {lo, hi - lo};
}
}  // namespace

AdamW::AdamW(const ParamLayout& layout, AdamWConfig cfg, kernels::Ops& ops, std::vector<BufferSpan> owned)
    : cfg_(cfg), ops_(ops), owned_(std::move(owned)), m_(ops.device()), v_(ops.device()), decay_(ops.device()) {
  if (owned_.empty()) owned_.push_back({0, layout.total()});
  int64_t n = 0;
  for (const BufferSpan& s : owned_) n += s.numel;
  m_.resize(size_t(n));
  v_.resize(size_t(n));
  decay_.resize(size_t(n));
  // The mask is written where it lives (zeroed on allocation; a byte per
  // parameter, 124 MB at GPT-2 small): on the CPU in place, on a GPU through
  // one host copy of the owned part. A full-size host mask plus its copy cost
  // GPT-2 small's start-up ~60 k page faults (docs/results/startup.md).
  std::vector<uint8_t> staging(decay_.on_host() ? 0 : size_t(n), 0);
  uint8_t* mask = decay_.on_host() ? decay_.data() : staging.data();
  int64_t at = 0;  // position of the span in the moments
  for (const BufferSpan& s : owned_) {
    for (const auto& t : layout.tensors()) {
      if (!t.weight_decay) continue;
      const BufferSpan p = part_inside(s, t.offset, t.numel);
      if (p.numel > 0) std::memset(mask + at + (p.offset - s.offset), 1, size_t(p.numel));
    }
    at += s.numel;
  }
  if (!decay_.on_host() && n > 0) decay_.copy_from_host(staging.data(), size_t(n));
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
      const BufferSpan p = part_inside(s, t.offset, t.numel);
      if (p.numel > 0) parts.push_back({p.offset, p.numel});
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
