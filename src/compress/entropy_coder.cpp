#include "compress/entropy_coder.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "compress/adaptive_codec.h"
#include "core/error.h"

namespace occ {

namespace rans {

namespace {
constexpr uint32_t kScaleBits = 12, kTotal = 1u << kScaleBits;  // probabilities in 1/4096
constexpr uint32_t kLow = 1u << 23;                              // the state's lower bound

void put16(std::vector<uint8_t>& out, uint32_t v) {
  out.push_back(uint8_t(v)), out.push_back(uint8_t(v >> 8));
}
void put32(std::vector<uint8_t>& out, uint32_t v) {
  for (int k = 0; k < 4; ++k) out.push_back(uint8_t(v >> (8 * k)));
}
uint32_t get(const uint8_t* in, size_t size, size_t& pos, int bytes) {
  OCC_CHECK(pos + size_t(bytes) <= size, "corrupt entropy-coded message: a field runs past its {} bytes", size);
  uint32_t v = 0;
  for (int k = 0; k < bytes; ++k) v |= uint32_t(in[pos + size_t(k)]) << (8 * k);
  pos += size_t(bytes);
  return v;
}

// Frequencies summing to kTotal from the counts: each present symbol gets
// floor(count * kTotal / n), at least 1; the sum is then corrected on the most
// frequent symbols (ties to the lower symbol), one unit at a time.
std::array<uint32_t, 256> normalise(const std::array<uint32_t, 256>& counts, size_t n) {
  std::array<uint32_t, 256> f{};
  int64_t sum = 0;
  for (int s = 0; s < 256; ++s) {
    if (!counts[size_t(s)]) continue;
    f[size_t(s)] = std::max<uint32_t>(1, uint32_t(uint64_t(counts[size_t(s)]) * kTotal / n));
    sum += f[size_t(s)];
  }
  while (sum != int64_t(kTotal)) {
    // The symbol that can best take (or give) a unit: the largest count whose frequency stays >= 1.
    int best = -1;
    for (int s = 0; s < 256; ++s)
      if (counts[size_t(s)] && (sum < int64_t(kTotal) || f[size_t(s)] > 1) &&
          (best < 0 || counts[size_t(s)] > counts[size_t(best)]))
        best = s;
    if (sum < int64_t(kTotal)) ++f[size_t(best)], ++sum;
    else --f[size_t(best)], --sum;
  }
  return f;
}
}  // namespace

void encode_stream(const std::vector<uint8_t>& symbols, std::vector<uint8_t>& out) {
  std::array<uint32_t, 256> counts{};
  for (uint8_t s : symbols) ++counts[s];
  if (symbols.empty()) counts[0] = 1;  // a table of one symbol, nothing coded
  const std::array<uint32_t, 256> freq = normalise(counts, std::max<size_t>(symbols.size(), 1));
  std::array<uint32_t, 256> start{};
  uint32_t present = 0, at = 0;
  for (int s = 0; s < 256; ++s) start[size_t(s)] = at, at += freq[size_t(s)], present += freq[size_t(s)] ? 1 : 0;
  put16(out, present);
  for (int s = 0; s < 256; ++s)
    if (freq[size_t(s)]) out.push_back(uint8_t(s)), put16(out, freq[size_t(s)]);
  // Encoded backwards into a buffer filled from its end; the decoder reads it forwards.
  std::vector<uint8_t> buf(symbols.size() * 2 + 8);
  size_t pos = buf.size();
  uint32_t x = kLow;
  for (size_t i = symbols.size(); i-- > 0;) {
    const uint32_t f = freq[symbols[i]], x_max = ((kLow >> kScaleBits) << 8) * f;
    while (x >= x_max) buf[--pos] = uint8_t(x), x >>= 8;
    x = ((x / f) << kScaleBits) + (x % f) + start[symbols[i]];
  }
  for (int k = 0; k < 4; ++k) buf[--pos] = uint8_t(x >> (8 * (3 - k)));  // the state, little-endian first
  put32(out, uint32_t(buf.size() - pos));
  out.insert(out.end(), buf.begin() + std::ptrdiff_t(pos), buf.end());
}

void decode_stream(const uint8_t* in, size_t size, size_t& pos, size_t n, uint8_t* symbols) {
  const uint32_t present = get(in, size, pos, 2);
  OCC_CHECK(present >= 1 && present <= 256, "corrupt entropy-coded message: {} symbols in a table", present);
  std::array<uint32_t, 256> freq{}, start{};
  std::vector<uint8_t> slot_symbol(kTotal);
  uint32_t at = 0;
  for (uint32_t k = 0; k < present; ++k) {
    const uint32_t s = get(in, size, pos, 1), f = get(in, size, pos, 2);
    OCC_CHECK(f >= 1 && freq[s] == 0, "corrupt entropy-coded message: symbol {} of frequency {}", s, f);
    freq[s] = f;
    OCC_CHECK(at + freq[s] <= kTotal, "corrupt entropy-coded message: frequencies exceed {}", kTotal);
    start[s] = at;
    std::fill(slot_symbol.begin() + at, slot_symbol.begin() + at + freq[s], uint8_t(s));
    at += freq[s];
  }
  OCC_CHECK(at == kTotal, "corrupt entropy-coded message: frequencies sum to {}, not {}", at, kTotal);
  const uint32_t bytes = get(in, size, pos, 4);
  OCC_CHECK(bytes >= 4 && pos + bytes <= size, "corrupt entropy-coded message: a stream of {} bytes", bytes);
  const uint8_t* p = in + pos;
  const uint8_t* end = p + bytes;
  uint32_t x = 0;
  for (int k = 0; k < 4; ++k) x |= uint32_t(*p++) << (8 * k);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t s = slot_symbol[x & (kTotal - 1)];
    symbols[i] = s;
    x = freq[s] * (x >> kScaleBits) + (x & (kTotal - 1)) - start[s];
    while (x < kLow) {
      OCC_CHECK(p < end, "corrupt entropy-coded message: a stream ends early");
      x = (x << 8) | *p++;
    }
  }
  pos += bytes;
}

}  // namespace rans

namespace {
using Section = BlockWireCoder::Section;
uint32_t get_bits(const uint8_t* bytes, int64_t j, int bits) {
  const int64_t bit = int64_t(bits) * j, at = bit >> 3;
  const int shift = int(bit & 7);
  uint32_t v = uint32_t(bytes[at]) >> shift;
  if (shift + bits > 8) v |= uint32_t(bytes[at + 1]) << (8 - shift);
  return v & ((1u << bits) - 1u);
}
void put_bits(uint8_t* bytes, int64_t j, int bits, uint32_t c) {
  const int64_t bit = int64_t(bits) * j, at = bit >> 3;
  const int shift = int(bit & 7);
  bytes[at] = uint8_t(bytes[at] | (c << shift));
  if (shift + bits > 8) bytes[at + 1] = uint8_t(bytes[at + 1] | (c >> (8 - shift)));
}
}  // namespace

BlockWireCoder::BlockWireCoder(std::vector<Section> sections) : sections_(std::move(sections)), raw_bytes_(0) {
  for (const Section& s : sections_) raw_bytes_ += s.bytes();
}

BlockWireCoder::BlockWireCoder(kernels::BlockCode code, int64_t rows, int64_t cols)
    : BlockWireCoder(std::vector<Section>{
          {Section::Raw, rows * kernels::block_row_scale_bytes(code), 1},
          {Section::Lanes, rows * kernels::blocks_per_row(code, cols), kernels::block_scale_bytes(code)},
          {Section::Codes, rows * kernels::blocks_per_row(code, cols) * kernels::block_entries(code),
           kernels::block_code_bits(code)}}) {
  OCC_CHECK(raw_bytes_ == kernels::block_wire_bytes(code, rows, cols), "internal: a block wire of {} bytes, not {}",
            raw_bytes_, kernels::block_wire_bytes(code, rows, cols));
}

BlockWireCoder BlockWireCoder::adaptive(int64_t rows, int64_t cols, double high_fraction) {
  const int64_t t = adaptive::tiles(rows, cols), h = adaptive::high_tiles(t, high_fraction);
  BlockWireCoder coder(std::vector<Section>{{Section::Raw, adaptive::map_bytes(t), 1},
                                            {Section::Lanes, t, adaptive::kScaleBytes},
                                            {Section::Codes, h * adaptive::kTile, 4},
                                            {Section::Codes, (t - h) * adaptive::kTile, 2}});
  OCC_CHECK(coder.raw_bytes() == adaptive::wire_bytes(rows, cols, high_fraction),
            "internal: an adaptive wire of {} bytes, not {}", coder.raw_bytes(),
            adaptive::wire_bytes(rows, cols, high_fraction));
  return coder;
}

int64_t BlockWireCoder::encode(const uint8_t* raw, uint8_t* out) {
  out_.clear();
  out_.resize(4);  // the header, below
  const uint8_t* at = raw;
  for (const Section& s : sections_) {
    if (s.kind == Section::Raw) {
      out_.insert(out_.end(), at, at + s.count);
    } else if (s.kind == Section::Lanes) {
      for (int lane = 0; lane < s.width; ++lane) {
        symbols_.resize(size_t(s.count));
        for (int64_t b = 0; b < s.count; ++b) symbols_[size_t(b)] = at[b * s.width + lane];
        rans::encode_stream(symbols_, out_);
      }
    } else {
      symbols_.resize(size_t(s.count));
      for (int64_t j = 0; j < s.count; ++j) symbols_[size_t(j)] = uint8_t(get_bits(at, j, s.width));
      rans::encode_stream(symbols_, out_);
    }
    at += s.bytes();
  }
  const bool coded = int64_t(out_.size()) < raw_bytes_ + 4;  // else the raw wire, never more
  const int64_t bytes = coded ? int64_t(out_.size()) : raw_bytes_ + 4;
  const uint32_t header = uint32_t(bytes) << 1 | (coded ? 1u : 0u);
  for (int k = 0; k < 4; ++k) out[k] = uint8_t(header >> (8 * k));
  if (coded)
    std::memcpy(out + 4, out_.data() + 4, out_.size() - 4);
  else
    std::memcpy(out + 4, raw, size_t(raw_bytes_));
  return bytes;
}

void BlockWireCoder::decode(const uint8_t* in, int64_t size, uint8_t* raw) const {
  OCC_CHECK(size >= 4, "corrupt entropy-coded message: {} bytes", size);
  uint32_t header = 0;
  for (int k = 0; k < 4; ++k) header |= uint32_t(in[k]) << (8 * k);
  const bool coded = header & 1u;
  const int64_t bytes = int64_t(header >> 1);
  OCC_CHECK(bytes >= 4 && bytes <= size && bytes <= capacity_bytes(),
            "corrupt entropy-coded message: it says {} bytes, {} arrived (at most {})", bytes, size, capacity_bytes());
  size = bytes;
  if (!coded) {
    OCC_CHECK(size == raw_bytes_ + 4, "corrupt entropy-coded message: a raw wire of {} bytes, not {}", size - 4,
              raw_bytes_);
    std::memcpy(raw, in + 4, size_t(raw_bytes_));
    return;
  }
  size_t pos = 4;
  uint8_t* at = raw;
  std::vector<uint8_t> symbols;
  for (const Section& s : sections_) {
    if (s.kind == Section::Raw) {
      OCC_CHECK(int64_t(pos) + s.count <= size, "corrupt entropy-coded message: raw bytes past its end");
      std::memcpy(at, in + pos, size_t(s.count));
      pos += size_t(s.count);
    } else if (s.kind == Section::Lanes) {
      symbols.resize(size_t(s.count));
      for (int lane = 0; lane < s.width; ++lane) {
        rans::decode_stream(in, size_t(size), pos, size_t(s.count), symbols.data());
        for (int64_t b = 0; b < s.count; ++b) at[b * s.width + lane] = symbols[size_t(b)];
      }
    } else {
      symbols.resize(size_t(s.count));
      rans::decode_stream(in, size_t(size), pos, symbols.size(), symbols.data());
      std::memset(at, 0, size_t(s.bytes()));
      for (int64_t j = 0; j < s.count; ++j) {
        const uint32_t c = symbols[size_t(j)];
        OCC_CHECK(c < (1u << s.width), "corrupt entropy-coded message: code {} of {} bits", c, s.width);
        put_bits(at, j, s.width, c);
      }
    }
    at += s.bytes();
  }
  OCC_CHECK(int64_t(pos) == size, "corrupt entropy-coded message: {} bytes left over", size - int64_t(pos));
}

}  // namespace occ
