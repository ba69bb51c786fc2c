#pragma once
// Lossy compression of a row-major matrix into a wire buffer and back.
// Compressors are stateful (e.g. PowerSGD's warm-started Q), and their state
// is saved with the rank's checkpoint so a resumed run continues bit-exactly.
// A compressor lives on one device (kernels::Ops): the matrix, the wire and
// its state are in that device's memory; checkpoints hold host copies, so a
// state saved on one device loads on the other.
#include <cstdint>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/tensor_file.h"

namespace occ {

class MatrixCompressor {
 public:
  virtual ~MatrixCompressor() = default;
  virtual int64_t rows() const = 0;
  virtual int64_t cols() const = 0;
  // Floats on the wire for one rows x cols matrix.
  virtual int64_t wire_floats() const = 0;
  // Encodes m[rows x cols] into wire[wire_floats()]; updates the warm start.
  virtual void encode(const float* m, float* wire) = 0;
  // Rebuilds the approximation of the encoded matrix into out[rows x cols].
  virtual void decode(const float* wire, float* out) const = 0;
  // The messages encoded from now on are `message` (a hash of the link, step
  // and micro-batch: LinkCodec::encode): what keys stochastic rounding's bits,
  // so identical inputs in two messages round independently. Methods without
  // random bits ignore it; a compressor never told keeps its own key.
  virtual void set_message_key(uint64_t /*message*/) {}
  // Does it keep state between messages (a warm start, a residual) that a
  // checkpoint must hold? Stateless ones continue any run exactly when fresh.
  virtual bool stateful() const { return true; }
  virtual void save_state(TensorFileWriter& w, const std::string& prefix) const = 0;
  // Loads what the file holds under prefix that fits this compressor; returns
  // false unless that was all of its state (the missing parts stay fresh).
  virtual bool load_state(const TensorFileReader& r, const std::string& prefix) = 0;
};

// Compressor state on a device, in checkpoints: written and read as host copies.
inline void save_device_state(TensorFileWriter& w, const std::string& name, const DeviceBuffer<float>& state,
                              std::vector<int64_t> shape) {
  w.add(name, state.to_host().data(), std::move(shape));
}
// Reads all of `state` (the caller has checked the saved shape).
inline void load_device_state(const TensorFileReader& r, const std::string& name, DeviceBuffer<float>& state) {
  std::vector<float> host(state.size());
  r.read(name, host.data(), int64_t(host.size()));
  state.copy_from_host(host.data(), host.size());
}

}  // namespace occ
