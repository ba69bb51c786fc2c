// The lossless stage of the pipeline links (compress/entropy_coder.h, compress/link_codec.h).
//
// Facts checked:
//   * rANS streams decode to their symbols for alphabets of 1..256 symbols,
//     uniform and skewed, of 0, 1 and many symbols, and take within 1 % (plus
//     the table and the 4-byte state) of the symbols' empirical entropy;
//   * a block wire coded and decoded is the same bytes, for every block method;
//     a Gaussian message's wire shrinks, an incompressible one is sent raw
//     (4 bytes more, never more than capacity_bytes());
//   * malformed messages (truncated, a size past what arrived, bad tables)
//     throw occ::Error instead of reading out of bounds;
//   * a pipeline codec with --*-comp-lossless rans sends fewer words and
//     decodes to exactly what the codec without it decodes; it refuses a
//     method that is not a block method.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "compress/block_compressor.h"
#include "compress/compressed_activations.h"
#include "compress/entropy_coder.h"
#include "core/error.h"

#include "compressor_test_util.h"

namespace occ {
namespace {
using kernels::BlockCode;

double entropy_bits(const std::vector<uint8_t>& s) {
  std::map<uint8_t, double> counts;
  for (uint8_t v : s) counts[v] += 1;
  double h = 0;
  for (auto& [v, c] : counts) h -= c * std::log2(c / double(s.size()));
  return h;
}

TEST(Rans, StreamsRoundTripNearTheirEntropy) {
  std::mt19937 gen(3);
  for (int alphabet : {1, 2, 8, 16, 256})
    for (bool skewed : {false, true})
      for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(5000), size_t(100000)}) {
        std::vector<uint8_t> s(n);
        std::geometric_distribution<int> geo(0.35);
        std::uniform_int_distribution<int> uni(0, alphabet - 1);
        for (auto& v : s) v = uint8_t(skewed ? std::min(geo(gen), alphabet - 1) : uni(gen));
        std::vector<uint8_t> out{0xaa};  // a stream appends
        rans::encode_stream(s, out);
        size_t pos = 1;
        std::vector<uint8_t> back(n, 0xff);
        rans::decode_stream(out.data(), out.size(), pos, n, back.data());
        EXPECT_EQ(pos, out.size()) << alphabet << " " << n;
        EXPECT_EQ(back, s) << "alphabet " << alphabet << (skewed ? " skewed" : " uniform") << ", " << n << " symbols";
        const double table = 2 + 3.0 * std::min<double>(alphabet, double(std::max<size_t>(n, 1))), state = 4 + 4;
        if (n >= 5000)
          EXPECT_LE(double(out.size() - 1), entropy_bits(s) / 8 * 1.01 + table + state)
              << "alphabet " << alphabet << ", " << n << " symbols";
        std::vector<uint8_t> again{0xaa};
        rans::encode_stream(s, again);
        EXPECT_EQ(again, out) << "deterministic";
      }
}

TEST(Rans, MalformedStreamsThrow) {
  std::vector<uint8_t> s(1000);
  for (size_t i = 0; i < s.size(); ++i) s[i] = uint8_t(i % 5 == 0 ? 3 : i % 2);
  std::vector<uint8_t> out;
  rans::encode_stream(s, out);
  std::vector<uint8_t> back(s.size());
  for (size_t cut : {size_t(0), size_t(3), out.size() / 2, out.size() - 1}) {
    size_t pos = 0;
    EXPECT_THROW(rans::decode_stream(out.data(), cut, pos, s.size(), back.data()), Error) << "cut at " << cut;
  }
  std::vector<uint8_t> bad = out;
  bad[3] ^= 0x40;  // the first frequency: the table no longer sums to 4096
  size_t pos = 0;
  EXPECT_THROW(rans::decode_stream(bad.data(), bad.size(), pos, s.size(), back.data()), Error);
}

std::vector<uint8_t> wire_bytes_of(BlockCode code, int64_t r, int64_t c, const std::vector<float>& x) {
  BlockCompressor q(r, c, code, false, 1, 2);
  std::vector<float> wire(size_t(q.wire_floats()));
  q.encode(x.data(), wire.data());
  std::vector<uint8_t> bytes(size_t(BlockCompressor::wire_bytes(code, r, c)));
  std::memcpy(bytes.data(), wire.data(), bytes.size());
  return bytes;
}

TEST(BlockWireCoder, CodesLosslesslyAndFallsBackToRaw) {
  const int64_t r = 64, c = 100;  // blocks of 32 padded
  const auto x = test::gaussian(size_t(r * c), 8);
  for (BlockCode code : {BlockCode::Mxfp4, BlockCode::Nvfp4, BlockCode::Int4, BlockCode::Int3}) {
    BlockWireCoder coder(code, r, c);
    const auto raw = wire_bytes_of(code, r, c, x);
    ASSERT_EQ(int64_t(raw.size()), coder.raw_bytes());
    std::vector<uint8_t> msg(size_t(coder.capacity_bytes()) + 3, 0), back(raw.size());
    const int64_t bytes = coder.encode(raw.data(), msg.data());
    EXPECT_LT(bytes, coder.raw_bytes()) << "a Gaussian's codes are not uniform";
    coder.decode(msg.data(), bytes + 3, back.data());  // (arrived padded to a word)
    EXPECT_EQ(back, raw);
    // Uniformly random bytes as a wire: nothing to gain, sent raw.
    std::vector<uint8_t> noise(raw.size());
    std::mt19937 gen(5);
    for (auto& b : noise) b = uint8_t(gen());
    const int64_t raw_size = coder.encode(noise.data(), msg.data());
    EXPECT_EQ(raw_size, coder.capacity_bytes());
    coder.decode(msg.data(), raw_size, back.data());
    EXPECT_EQ(back, noise);
    // Malformed: truncated, or claiming more than arrived.
    EXPECT_THROW(coder.decode(msg.data(), 3, back.data()), Error);
    coder.encode(raw.data(), msg.data());
    EXPECT_THROW(coder.decode(msg.data(), bytes - 1, back.data()), Error);
    std::vector<uint8_t> cut(msg.begin(), msg.begin() + bytes);
    const uint32_t fewer = uint32_t(bytes - 4) << 1 | 1u;  // says 4 bytes fewer than its streams take
    for (int k = 0; k < 4; ++k) cut[size_t(k)] = uint8_t(fewer >> (8 * k));
    EXPECT_THROW(coder.decode(cut.data(), bytes, back.data()), Error);
  }
}

TEST(LinkCodec, LosslessStageSendsFewerWordsAndDecodesTheSame) {
  const int64_t r = 128, c = 256;
  const auto x = test::gaussian(size_t(r * c), 12);
  for (CompressionMethod m : {CompressionMethod::Mxfp4, CompressionMethod::Int3}) {
    ActivationCompressionConfig plain_cfg{.enabled = true, .method = m}, rans_cfg = plain_cfg;
    rans_cfg.lossless = LosslessCoding::Rans;
    CompressedActivations plain(plain_cfg, r, c), coded(rans_cfg, r, c);
    EXPECT_FALSE(plain.variable_size());
    EXPECT_TRUE(coded.variable_size());
    std::vector<float> wp(size_t(plain.wire_floats())), wc(size_t(coded.wire_floats()));
    const int64_t sent_plain = plain.encode(x.data(), wp.data(), {}), sent = coded.encode(x.data(), wc.data(), {});
    EXPECT_EQ(sent_plain, plain.wire_floats());
    EXPECT_LT(sent, sent_plain) << method_name(m);
    EXPECT_LE(sent, coded.wire_floats());
    std::vector<float> a(size_t(r * c)), b(size_t(r * c));
    plain.decode(wp.data(), sent_plain, a.data(), {});
    coded.decode(wc.data(), sent, b.data(), {});
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << method_name(m);
  }
  ActivationCompressionConfig int8{.enabled = true, .method = CompressionMethod::Int8};
  int8.lossless = LosslessCoding::Rans;
  EXPECT_THROW(CompressedActivations(int8, r, c), Error);
  EXPECT_THROW(parse_lossless("zstd", "--activation-comp-lossless"), UsageError);
}

}  // namespace
}  // namespace occ
