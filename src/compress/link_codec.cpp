#include "compress/link_codec.h"

#include <fmt/format.h>

#include "compress/wire.h"
#include "core/error.h"
#include "core/rng.h"

namespace occ {

LosslessCoding parse_lossless(const std::string& value, const std::string& flag) {
  if (value == "none") return LosslessCoding::None;
  if (value == "rans") return LosslessCoding::Rans;
  throw UsageError(fmt::format("{} '{}' is not a lossless coding; use none|rans", flag, value));
}

LinkCodec::LinkCodec(std::unique_ptr<MatrixCompressor> compressor, const CompressorSpec& spec,
                     LosslessCoding lossless, CompressorPlacement where, const std::string& dump,
                     const std::string& dump_name, uint64_t link)
    : compressor_(std::move(compressor)), link_(link) {
  if (lossless == LosslessCoding::Rans) {
    OCC_CHECK(method_takes_block_options(spec.method),
              "lossless rans codes the block methods' wires ({}), not {}; drop the --*-comp-lossless flag or use "
              "one of those methods",
              block_option_method_names(), method_name(spec.method));
    OCC_CHECK(where.device() == Device::Cpu,
              "lossless rans codes the wire on the host, and this run's pipeline codecs run on the GPU; drop the "
              "--*-comp-lossless flag (it is for the CPU backend)");
    coder_ = method_is_adaptive(spec.method)
                 ? std::make_unique<BlockWireCoder>(
                       BlockWireCoder::adaptive(compressor_->rows(), compressor_->cols(), spec.high_fraction))
                 : std::make_unique<BlockWireCoder>(block_code_of(spec.method), compressor_->rows(), compressor_->cols());
    raw_.resize(size_t(compressor_->wire_floats()));
  }
  if (!dump.empty() && !dump_name.empty())
    dump_ = std::make_unique<MessageDump>(dump, dump_name, compressor_->rows(), compressor_->cols(), where.device());
}

int64_t LinkCodec::wire_floats() const {
  return coder_ ? wire::words_for_bytes(coder_->capacity_bytes()) : compressor_->wire_floats();
}

uint64_t LinkCodec::message_key(const MessageId& id) const {
  return make_key(link_, uint64_t(id.iteration), uint64_t(id.micro_batch), uint64_t(id.chunk));
}

int64_t LinkCodec::encode(const float* slice, float* wire, const MessageId& id) {
  if (dump_) dump_->record(slice);
  compressor_->set_message_key(message_key(id));
  if (!coder_) {
    compressor_->encode(slice, wire);
    return compressor_->wire_floats();
  }
  compressor_->encode(slice, raw_.data());
  unsigned char* out = reinterpret_cast<unsigned char*>(wire);
  const int64_t bytes = coder_->encode(reinterpret_cast<const unsigned char*>(raw_.data()), out);
  const int64_t words = wire::words_for_bytes(bytes);
  for (int64_t b = bytes; b < 4 * words; ++b) out[b] = 0;  // the last word's padding
  return words;
}

void LinkCodec::decode(const float* wire, int64_t floats, float* slice, const MessageId& id) const {
  // The receiver's own compressor (never shared), keyed as its sender's was for this message.
  compressor_->set_message_key(message_key(id));
  if (!coder_) {
    OCC_CHECK(floats == compressor_->wire_floats(), "internal: a message of {} words where {} were expected", floats,
              compressor_->wire_floats());
    compressor_->decode(wire, slice);
    return;
  }
  coder_->decode(reinterpret_cast<const unsigned char*>(wire), 4 * floats, reinterpret_cast<unsigned char*>(raw_.data()));
  compressor_->decode(raw_.data(), slice);
}

}  // namespace occ
