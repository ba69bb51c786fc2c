#include "compress/entropy_coder.h"

#include <algorithm>
#include <array>
#include <cstring>

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

BlockWireCoder::BlockWireCoder(kernels::BlockCode code, int64_t rows, int64_t cols)
    : code_(code),
      rows_(rows),
      blocks_(rows * kernels::blocks_per_row(code, cols)),
      raw_bytes_(kernels::block_wire_bytes(code, rows, cols)) {}

int64_t BlockWireCoder::encode(const uint8_t* raw, uint8_t* out) {
  using namespace kernels;
  out_.clear();
  out_.resize(4);  // the header, below
  const int64_t row_bytes = rows_ * block_row_scale_bytes(code_);
  out_.insert(out_.end(), raw, raw + row_bytes);
  const uint8_t* scales = raw + block_scales_offset(code_, rows_);
  const int sb = block_scale_bytes(code_);
  for (int byte = 0; byte < sb; ++byte) {
    symbols_.resize(size_t(blocks_));
    for (int64_t b = 0; b < blocks_; ++b) symbols_[size_t(b)] = scales[b * sb + byte];
    rans::encode_stream(symbols_, out_);
  }
  const uint8_t* codes = scales + blocks_ * sb;
  const int B = block_entries(code_), cb = block_code_bytes(code_);
  symbols_.resize(size_t(blocks_ * B));
  for (int64_t b = 0; b < blocks_; ++b)
    for (int j = 0; j < B; ++j) symbols_[size_t(b * B + j)] = uint8_t(get_code(code_, codes + b * cb, j));
  rans::encode_stream(symbols_, out_);
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
  using namespace kernels;
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
  const int64_t row_bytes = rows_ * block_row_scale_bytes(code_);
  OCC_CHECK(int64_t(pos) + row_bytes <= size, "corrupt entropy-coded message: row scales past its end");
  std::memcpy(raw, in + pos, size_t(row_bytes));
  pos += size_t(row_bytes);
  uint8_t* scales = raw + block_scales_offset(code_, rows_);
  const int sb = block_scale_bytes(code_);
  std::vector<uint8_t> symbols(static_cast<size_t>(blocks_));
  for (int byte = 0; byte < sb; ++byte) {
    rans::decode_stream(in, size_t(size), pos, size_t(blocks_), symbols.data());
    for (int64_t b = 0; b < blocks_; ++b) scales[b * sb + byte] = symbols[size_t(b)];
  }
  uint8_t* codes = scales + blocks_ * sb;
  const int B = block_entries(code_), cb = block_code_bytes(code_);
  symbols.resize(size_t(blocks_ * B));
  rans::decode_stream(in, size_t(size), pos, symbols.size(), symbols.data());
  std::memset(codes, 0, size_t(blocks_ * cb));
  for (int64_t b = 0; b < blocks_; ++b)
    for (int j = 0; j < B; ++j) {
      const uint32_t c = symbols[size_t(b * B + j)];
      OCC_CHECK(c < (1u << block_code_bits(code_)), "corrupt entropy-coded message: code {} of {} bits", c,
                block_code_bits(code_));
      put_code(code_, codes + b * cb, j, c);
    }
  OCC_CHECK(int64_t(pos) == size, "corrupt entropy-coded message: {} bytes left over", size - int64_t(pos));
}

}  // namespace occ
