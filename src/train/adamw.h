#pragma once
// AdamW over the flat parameter buffer of one rank, with weight decay masked
// per tensor (matrices only) and global grad-norm clipping. The moments live on
// the parameters' device and the update runs through that device's Ops. With
// the distributed optimizer it updates only this rank's spans of the buffer
// (parallel/optimizer_shards.h) and keeps the moments of those alone.
#include <cstdint>
#include <vector>

#include "core/buffer.h"
#include "kernels/ops.h"
#include "model/params.h"
#include "parallel/optimizer_shards.h"

namespace occ {

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.01f;
};

class AdamW {
 public:
  // owned: the spans of the buffer this rank updates (empty: all of it).
  AdamW(const ParamLayout& layout, AdamWConfig cfg, kernels::Ops& ops, std::vector<BufferSpan> owned = {});
  // One update with learning rate lr; `step` counts updates from 1 (bias correction).
  void update(float* params, const float* grads, float lr, int64_t step);
  DeviceBuffer<float>& m() { return m_; }
  DeviceBuffer<float>& v() { return v_; }
  const DeviceBuffer<float>& m() const { return m_; }
  const DeviceBuffer<float>& v() const { return v_; }
  const AdamWConfig& config() const { return cfg_; }
  // The spans updated, in the order of the moments' values.
  const std::vector<BufferSpan>& owned() const { return owned_; }

 private:
  AdamWConfig cfg_;
  kernels::Ops& ops_;
  std::vector<BufferSpan> owned_;
  DeviceBuffer<float> m_, v_;
  DeviceBuffer<uint8_t> decay_;  // per element, from the tensor's weight_decay flag
};

// Sum of squared gradients of the tensors this rank counts in the global norm
// (each parameter counted once across the whole job).
// Restricted to `spans` when given (the distributed optimizer's owned spans).
double local_grad_sq_norm(kernels::Ops& ops, const ParamLayout& layout, const float* grads,
                          const std::vector<BufferSpan>* spans = nullptr);
// Scales grads by clip / (norm + 1e-6) when that is < 1. Returns the factor used.
float clip_grads(kernels::Ops& ops, float* grads, int64_t n, double global_norm, float clip);

}  // namespace occ
