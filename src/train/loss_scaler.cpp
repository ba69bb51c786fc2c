#include "train/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace occ {

void LossScaleConfig::validate() const {
  OCC_CHECK(loss_scale >= 0 && std::isfinite(loss_scale), "--loss-scale must be a finite number > 0 (or 0 for dynamic)");
  OCC_CHECK(initial_loss_scale >= 1 && std::isfinite(initial_loss_scale),
            "--initial-loss-scale must be a finite number >= 1 (got {})", initial_loss_scale);
  OCC_CHECK(min_loss_scale > 0 && min_loss_scale <= initial_loss_scale,
            "--min-loss-scale must be > 0 and <= --initial-loss-scale (got {})", min_loss_scale);
  OCC_CHECK(loss_scale_window >= 1, "--loss-scale-window must be >= 1 (got {})", loss_scale_window);
  OCC_CHECK(hysteresis >= 1, "--hysteresis must be >= 1 (got {})", hysteresis);
}

LossScaler::LossScaler(Precision precision, LossScaleConfig cfg) : cfg_(cfg) {
  active_ = precision == Precision::Fp16;
  dynamic_ = active_ && cfg.loss_scale <= 0.0f;
  scale_ = !active_ ? 1.0f : dynamic_ ? cfg.initial_loss_scale : cfg.loss_scale;
  hysteresis_tracker_ = cfg.hysteresis;
}

bool LossScaler::update(bool finite) {
  if (!finite) ++skipped_;
  if (!dynamic_) return !finite;
  if (!finite) {
    growth_tracker_ = 0;
    if (--hysteresis_tracker_ <= 0) scale_ = std::max(scale_ * 0.5f, cfg_.min_loss_scale);
    return true;
  }
  if (++growth_tracker_ == cfg_.loss_scale_window) {
    growth_tracker_ = 0;
    hysteresis_tracker_ = cfg_.hysteresis;
    scale_ *= 2.0f;
  }
  return false;
}

nlohmann::json LossScaler::state() const {
  return {{"scale", scale_}, {"growth_tracker", growth_tracker_}, {"hysteresis_tracker", hysteresis_tracker_},
          {"skipped", skipped_}};
}

void LossScaler::load_state(const nlohmann::json& j) {
  if (!active_ || !j.is_object()) return;
  if (dynamic_) {
    scale_ = j.value("scale", scale_);
    growth_tracker_ = j.value("growth_tracker", growth_tracker_);
    hysteresis_tracker_ = j.value("hysteresis_tracker", hysteresis_tracker_);
  }
  skipped_ = j.value("skipped", skipped_);
}

}  // namespace occ
