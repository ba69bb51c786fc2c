#pragma once
// A host compressor (top-k, sign: their packing runs on the CPU)
// used on another device's memory: encode downloads the matrix into
// page-locked host memory and encodes it there into the wire, which stays
// host memory (wire_on_host: MPI sends it as it is); decode unpacks a host
// wire and uploads the matrix. The wire's bytes, the rounding and the state
// are the inner compressor's, so both ends of a link agree whichever device
// each is on.
// On the CPU (the device is the host) it runs the same copies, which is how
// --debug-host-staging tests this path where no GPU is.
#include <memory>

#include "compress/compressor.h"
#include "core/device.h"
#include "core/host_staging.h"

namespace occ {

class HostStagedCompressor final : public MatrixCompressor {
 public:
  // `device`: where the callers' matrices and wires are.
  HostStagedCompressor(std::unique_ptr<MatrixCompressor> inner, Device device);
  int64_t rows() const override { return inner_->rows(); }
  int64_t cols() const override { return inner_->cols(); }
  int64_t wire_floats() const override { return inner_->wire_floats(); }
  bool wire_on_host() const override { return true; }
  // m, out: on the device; wire: host memory.
  void encode(const float* m, float* wire) override;
  void decode(const float* wire, float* out) const override;
  bool stateful() const override { return inner_->stateful(); }
  void save_state(TensorFileWriter& w, const std::string& prefix) const override { inner_->save_state(w, prefix); }
  bool load_state(const TensorFileReader& r, const std::string& prefix) override {
    return inner_->load_state(r, prefix);
  }

 private:
  std::unique_ptr<MatrixCompressor> inner_;
  Device device_;
  mutable PinnedBuffer matrix_;  // the host copy of the matrix (decode fills it too)
};

}  // namespace occ
