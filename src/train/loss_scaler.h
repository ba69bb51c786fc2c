#pragma once
// Dynamic loss scaling for --fp16 (Megatron's DynamicGradScaler semantics):
// the loss gradient is multiplied by `scale` so that small activation
// gradients survive fp16's range; gradients are unscaled before clipping and
// the optimizer. An iteration whose gradients overflow (non-finite) is skipped;
// after `hysteresis` overflows the scale halves (not below min_scale); after
// `window` clean iterations in a row it doubles. --loss-scale S fixes the scale
// instead (overflowing iterations are still skipped). fp32 and bf16 use 1.
#include <cstdint>

#include <nlohmann/json.hpp>

#include "core/precision.h"

namespace occ {

struct LossScaleConfig {
  float loss_scale = 0.0f;             // --loss-scale: static scale when > 0
  float initial_loss_scale = 4294967296.0f;  // --initial-loss-scale (2^32)
  float min_loss_scale = 1.0f;         // --min-loss-scale
  int64_t loss_scale_window = 1000;    // --loss-scale-window
  int hysteresis = 2;                  // --hysteresis
  void validate() const;               // throws occ::Error naming the flag
};

class LossScaler {
 public:
  LossScaler(Precision precision, LossScaleConfig cfg);
  bool active() const { return active_; }
  float scale() const { return scale_; }
  // After an iteration's backward: `finite` says whether every gradient was
  // finite. Updates the scale; returns true when the iteration must be skipped.
  bool update(bool finite);
  int64_t skipped() const { return skipped_; }

  // Checkpointed, so a resumed run scales (and skips) exactly as an uninterrupted one.
  nlohmann::json state() const;
  void load_state(const nlohmann::json& j);

 private:
  bool active_ = false, dynamic_ = false;
  LossScaleConfig cfg_;
  float scale_ = 1.0f;
  int64_t growth_tracker_ = 0, skipped_ = 0;
  int hysteresis_tracker_ = 0;
};

}  // namespace occ
