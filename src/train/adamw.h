#pragma once
// AdamW over the flat parameter buffer of one rank, with weight decay masked
// per tensor (matrices only) and global grad-norm clipping.
#include <cstdint>
#include <vector>

#include "model/params.h"

namespace occ {

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.01f;
};

class AdamW {
 public:
  AdamW(const ParamLayout& layout, AdamWConfig cfg);
  // One update with learning rate lr; `step` counts updates from 1 (bias correction).
  void update(float* params, const float* grads, float lr, int64_t step);
  std::vector<float>& m() { return m_; }
  std::vector<float>& v() { return v_; }
  const std::vector<float>& m() const { return m_; }
  const std::vector<float>& v() const { return v_; }
  const AdamWConfig& config() const { return cfg_; }

 private:
  AdamWConfig cfg_;
  std::vector<float> m_, v_;
  std::vector<uint8_t> decay_;  // per element, from the tensor's weight_decay flag
};

// Sum of squared gradients of the tensors this rank counts in the global norm
// (each parameter counted once across the whole job).
double local_grad_sq_norm(const ParamLayout& layout, const float* grads);
// Scales grads by clip / (norm + 1e-6) when that is < 1. Returns the factor used.
float clip_grads(float* grads, int64_t n, double global_norm, float clip);

}  // namespace occ
