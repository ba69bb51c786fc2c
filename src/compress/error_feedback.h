#pragma once
// Error feedback around any compressor (BytePS style), a decorator: before a
// message is encoded, the residual of the previous one joins it; the new
// residual is what the wire does not carry (input minus decoded).
//   corrected = m + decay * e ;  wire = encode(corrected) ;  e = corrected - decode(wire)
// decay 1 (the default) is plain error feedback: nothing is ever lost, the sum of
// everything decoded plus the final residual is the sum of the inputs. On a
// pipeline's backward link this is LEP (the residual of micro-batch k joins
// micro-batch k+1's gradient); decay < 1 forgets old error geometrically
// (--inter-grad-comp-lep-decay). Used by LEP (compressed_backprop), DP
// compression (dp_gather_compression) and DiLoCo's outer gradients (train/diloco).
#include <memory>
#include <string>

#include "compress/compressor.h"
#include "core/buffer.h"
#include "kernels/ops.h"

namespace occ {

// Scratch that many ErrorFeedback wrappers on one device may share (DiLoCo's one
// per parameter tensor): two buffers of the largest message, not two per tensor.
struct ErrorFeedbackScratch {
  DeviceBuffer<float> corrected, decoded;
};

class ErrorFeedback final : public MatrixCompressor {
 public:
  // scratch: null for buffers of its own, or one shared with wrappers that encode
  // one at a time on the same device.
  explicit ErrorFeedback(std::unique_ptr<MatrixCompressor> inner, kernels::Ops& ops = kernels::cpu_ops(),
                         float decay = 1.0f, ErrorFeedbackScratch* scratch = nullptr);
  int64_t rows() const override { return inner_->rows(); }
  int64_t cols() const override { return inner_->cols(); }
  int64_t wire_floats() const override { return inner_->wire_floats(); }
  void encode(const float* m, float* wire) override;
  void decode(const float* wire, float* out) const override { inner_->decode(wire, out); }
  void set_message_key(uint64_t message) override { inner_->set_message_key(message); }
  void save_state(TensorFileWriter& w, const std::string& prefix) const override;
  bool load_state(const TensorFileReader& r, const std::string& prefix) override;
  // The residual e (rows x cols), on the compressor's device; writable for a
  // caller that keeps it in a file of its own (DiLoCo's outer/residual/*).
  const DeviceBuffer<float>& residual() const { return error_; }
  DeviceBuffer<float>& residual() { return error_; }
  float decay() const { return decay_; }

 private:
  std::unique_ptr<MatrixCompressor> inner_;
  kernels::Ops& ops_;
  float decay_;
  DeviceBuffer<float> error_;
  ErrorFeedbackScratch own_;
  ErrorFeedbackScratch* scratch_;  // &own_ or a shared one
};

}  // namespace occ
