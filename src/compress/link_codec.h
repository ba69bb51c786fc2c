#pragma once
// What the two pipeline codecs (compressed_activations.h forward,
// compressed_backprop.h backward) share: a MatrixCompressor's wire, then
// optionally its lossless entropy coding on the host (--activation-comp-lossless
// / --inter-grad-comp-lossless rans: compress/entropy_coder.h; the block methods
// on the CPU backend), whose messages vary in size (at most wire_floats()
// words; the exchange receives up to that and passes the size on), and
// optionally the record of the messages (--debug-dump-messages, senders).
#include <memory>
#include <string>
#include <vector>

#include "compress/compressor.h"
#include "compress/compressor_factory.h"
#include "compress/entropy_coder.h"
#include "compress/message_dump.h"
#include "parallel/message_codec.h"

namespace occ {

// The lossless stage after a link's compressor.
enum class LosslessCoding { None, Rans };
// The flag spelling: none | rans; throws occ::UsageError naming `flag` on anything else.
LosslessCoding parse_lossless(const std::string& value, const std::string& flag);
inline const char* lossless_name(LosslessCoding l) { return l == LosslessCoding::Rans ? "rans" : "none"; }

class LinkCodec : public MessageCodec {
 public:
  int64_t wire_floats() const override;
  // Keys the compressor's stochastic rounding by (link, id) before encoding.
  int64_t encode(const float* slice, float* wire, const MessageId& id) override;
  // Keys the compressor by the sending link's identity and id alike (a rotation's signs).
  void decode(const float* wire, int64_t floats, float* slice, const MessageId& id) const override;
  bool variable_size() const override { return coder_ != nullptr; }

 protected:
  // compressor: the link's method on `where`'s device; lossless: its entropy
  // coding (throws occ::Error unless a block method on the CPU); dump: the
  // directory of --debug-dump-messages ("" or dump_name "": none); link: the
  // sending link's identity (direction, virtual stage, TP and DP rank), which
  // with each message's id keys its rounding and its rotation (a receiver
  // passes its sender's: it derives the same rotation).
  LinkCodec(std::unique_ptr<MatrixCompressor> compressor, const CompressorSpec& spec, LosslessCoding lossless,
            CompressorPlacement where, const std::string& dump, const std::string& dump_name, uint64_t link);
  std::unique_ptr<MatrixCompressor> compressor_;

 private:
  uint64_t message_key(const MessageId& id) const;
  uint64_t link_;
  std::unique_ptr<BlockWireCoder> coder_;
  mutable std::vector<float> raw_;  // the compressor's wire before (sender) or after (receiver) the coding
  std::unique_ptr<MessageDump> dump_;
};

}  // namespace occ
