#pragma once
// Lossless entropy coding of the block codecs' wires (kernels/block_codes.h) on
// the host, for the pipeline links (--activation-comp-lossless /
// --inter-grad-comp-lossless rans): the bits below 4 per value that the codes'
// skewed distributions leave (python3 -m occtools entropy-report measures them on real
// messages).
//
// rans::encode_stream is an order-0 static rANS coder (Duda's asymmetric
// numeral systems; the byte-wise coder of Giesen's ryg_rans): 32-bit state,
// renormalised a byte at a time to [2^23, 2^31), probabilities in 12 bits,
// normalised from the stream's own symbol counts (each present symbol at least
// 1/4096). A stream is
//   u16 present symbols k | k x (u8 symbol, u16 frequency) | u32 bytes | bytes
// (little-endian), its symbol count known to both ends. Integer-only: the same
// bytes on any host.
//
// BlockWireCoder codes one message's wire as separate streams, one per kind of
// field: nvfp4's fp32 row scales raw; the block scales one stream per byte of
// a scale (E8M0 / E4M3: one; bf16: the low and the high byte apart); the codes
// one stream of 4- or 3-bit symbols (every slot of every block, padding too).
// Message = u32 header (its bytes << 1 | 1 if coded; 0 in the low bit: the raw
// wire follows, where coding would not be smaller) | the streams; at most
// capacity_bytes(); it may arrive padded (to whole words). Lossless: decode gives
// back the raw wire's bytes exactly, so training is bit-identical with or
// without it, only the bytes sent change.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/block_codes.h"

namespace occ {

namespace rans {
// Appends the stream of `symbols` to out.
void encode_stream(const std::vector<uint8_t>& symbols, std::vector<uint8_t>& out);
// Decodes n symbols of the stream at in[pos] (pos advances past it); throws
// occ::Error if the stream is malformed or runs past size.
void decode_stream(const uint8_t* in, size_t size, size_t& pos, size_t n, uint8_t* symbols);
}  // namespace rans

// The adaptive codec's wire (compress/adaptive_codec.h) is coded the same way:
// its bit map raw, its bf16 scales as two byte streams, its high tiles' 4-bit
// codes one stream and its low tiles' 2-bit codes another.
class BlockWireCoder {
 public:
  // One part of a wire: `bytes` copied raw; or `count` fields of `lanes` bytes,
  // one stream per byte of a field; or `count` codes of `bits` bits (2, 3 or 4),
  // one stream, read from the part's bytes as one little-endian bit string.
  struct Section {
    enum Kind { Raw, Lanes, Codes } kind;
    int64_t count;  // Raw: bytes; Lanes: fields; Codes: codes
    int width;      // Lanes: bytes per field; Codes: bits per code
    int64_t bytes() const { return kind == Raw ? count : kind == Lanes ? count * width : (count * width + 7) / 8; }
  };
  BlockWireCoder(kernels::BlockCode code, int64_t rows, int64_t cols);
  // The adaptive codec's wire for rows x cols at that high fraction.
  static BlockWireCoder adaptive(int64_t rows, int64_t cols, double high_fraction);
  explicit BlockWireCoder(std::vector<Section> sections);
  // The raw wire's bytes (block_wire_bytes) and the most a coded message takes.
  int64_t raw_bytes() const { return raw_bytes_; }
  int64_t capacity_bytes() const { return raw_bytes_ + 4; }
  // Codes raw[raw_bytes()] into out[capacity_bytes()]; returns the message's bytes.
  int64_t encode(const uint8_t* raw, uint8_t* out);
  // Decodes a message that arrived in `size` bytes (its own, or more: padding)
  // back into raw[raw_bytes()]; throws occ::Error if malformed.
  void decode(const uint8_t* in, int64_t size, uint8_t* raw) const;

 private:
  std::vector<Section> sections_;
  int64_t raw_bytes_;
  std::vector<uint8_t> symbols_, out_;  // encode's scratch
};

}  // namespace occ
