#include "compress/error_feedback.h"

#include "core/error.h"

namespace occ {

ErrorFeedback::ErrorFeedback(std::unique_ptr<MatrixCompressor> inner, kernels::Ops& ops, float decay,
                             ErrorFeedbackScratch* scratch)
    : inner_(std::move(inner)), ops_(ops), decay_(decay), scratch_(scratch ? scratch : &own_) {
  OCC_CHECK(decay > 0.0f && decay <= 1.0f, "an error-feedback decay must be in (0, 1] (got {}); 1 keeps every error",
            decay);
  const size_t n = size_t(inner_->rows() * inner_->cols());
  error_ = DeviceBuffer<float>(ops_.device(), n);  // zero-filled
  for (DeviceBuffer<float>* b : {&scratch_->corrected, &scratch_->decoded})
    if (b->size() < n) *b = DeviceBuffer<float>(ops_.device(), n);
}

void ErrorFeedback::encode(const float* m, float* wire) {
  const int64_t n = int64_t(error_.size());
  float* corrected = scratch_->corrected.data();
  float* decoded = scratch_->decoded.data();
  // corrected = m + decay e; e = corrected - decoded (alpha = +-1: the same roundings as
  // writing the sums out; a decay of 1 multiplies exactly).
  ops_.copy(corrected, m, n);
  ops_.axpy(corrected, decay_, error_.data(), n);
  inner_->encode(corrected, wire);
  inner_->decode(wire, decoded);
  ops_.copy(error_.data(), corrected, n);
  ops_.axpy(error_.data(), -1.0f, decoded, n);
}

void ErrorFeedback::save_state(TensorFileWriter& w, const std::string& prefix) const {
  inner_->save_state(w, prefix);
  save_device_state(w, prefix + "error", error_, {inner_->rows(), inner_->cols()});
}

bool ErrorFeedback::load_state(const TensorFileReader& r, const std::string& prefix) {
  bool complete = inner_->load_state(r, prefix);
  if (r.has(prefix + "error") && r.numel(prefix + "error") == int64_t(error_.size()))
    load_device_state(r, prefix + "error", error_);
  else
    complete = false;
  return complete;
}

}  // namespace occ
