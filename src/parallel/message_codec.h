#pragma once
// What the pipeline exchange needs from a compressor of backward messages:
// the exchange (parallel/) moves the bytes, the codec (e.g. compress/'s
// CompressedBackprop) decides what they are. An interface here keeps the
// dependency pointing down: compress/ implements it, parallel/ only calls it.
#include <cstdint>

namespace occ {

// The codec sees fp32 slices (the step's values, which in a --bf16 / --fp16
// run are of the 16-bit format) and sends wire_floats() 4-byte words; the
// exchange counts what it saves against the run's own uncompressed wire:
// slice values x wire_value_bytes(PipelineExchange::wire()) (core/
// wire_format.h: 2 in a 16-bit run, 4 in fp32) minus 4 x wire_floats().
// Which message of a link is encoded: the iteration, and the micro-batch and
// model chunk whose output (forward) or input gradient (backward) it is. It
// keys stochastic rounding (compress/link_codec.h), so that identical blocks
// in two micro-batches, or two steps, round independently, and a rotation's
// signs (compress/rotated_compressor.h), which sender and receiver derive from
// it alike; a resumed run's iterations give the same keys.
struct MessageId {
  int64_t iteration = 0;
  int micro_batch = 0;
  int chunk = 0;
};

class MessageCodec {
 public:
  virtual ~MessageCodec() = default;
  // Floats (4-byte words) of one encoded message; of a variable_size() codec, the most.
  virtual int64_t wire_floats() const = 0;
  // Sender: encodes one TP rank's slice of message `id` into wire[wire_floats()];
  // returns the words of this message (wire_floats() unless variable_size()).
  virtual int64_t encode(const float* slice, float* wire, const MessageId& id) = 0;
  // Receiver: rebuilds the slice of message `id` from a message of `floats` words.
  virtual void decode(const float* wire, int64_t floats, float* slice, const MessageId& id) const = 0;
  // Do messages vary in size (a lossless stage)? Their receiver then takes up
  // to wire_floats() words and passes on how many came; only MPI links can.
  virtual bool variable_size() const { return false; }
};

}  // namespace occ
