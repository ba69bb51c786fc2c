#pragma once
// What the pipeline exchange needs from a compressor of backward messages:
// the exchange (parallel/) moves the bytes, the codec (e.g. compress/'s
// CompressedBackprop) decides what they are. An interface here keeps the
// dependency pointing down: compress/ implements it, parallel/ only calls it.
#include <cstdint>

namespace occ {

class MessageCodec {
 public:
  virtual ~MessageCodec() = default;
  // Floats of one encoded message.
  virtual int64_t wire_floats() const = 0;
  // Sender: encodes one TP rank's slice of the message into wire[wire_floats()].
  virtual void encode(const float* slice, float* wire) = 0;
  // Receiver: rebuilds the slice from a message of this link's shape.
  virtual void decode(const float* wire, float* slice) const = 0;
};

}  // namespace occ
