// The randomized Hadamard rotation (kernels/hadamard.h, compress/rotated_compressor.h)
// and the 2- and 3-bit table codes (int2, lloydmax2, lloydmax3: kernels/block_codes.h):
//   * the fast transform against its simple twin, the dense product from the
//     definition in double; rotating back is exact within 1e-6 relative in fp32;
//     norms are kept (orthogonal); the tail's power-of-two pieces;
//   * the signs: keyed by the key and the entry's place, not the block size;
//     sender and receiver of a pipeline link (both directions), of DP and of
//     another message derive the same (or other) keys without a byte sent;
//   * the table codes' levels (their Lloyd-Max property: each level is the
//     Gaussian's mean between its thresholds, computed here by quadrature),
//     hand-worked blocks, byte counts with padding, non-finite blocks, and what
//     rotation buys on a message with outliers.
// (The codes' bytes against a NumPy encoder from the definitions: cli.low_bit_reference.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "compress/block_compressor.h"
#include "compress/compressed_activations.h"
#include "compress/compressed_backprop.h"
#include "compress/compressor_factory.h"
#include "compress/powersgd.h"
#include "compress/rotated_compressor.h"
#include "core/error.h"
#include "kernels/kernels.h"

#include "compressor_test_util.h"

namespace occ {
namespace {

using kernels::BlockCode;
using test::gaussian;

double norm(const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(x[i]) * double(x[i]);
  return std::sqrt(s);
}
double distance(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += (double(a[i]) - double(b[i])) * (double(a[i]) - double(b[i]));
  return std::sqrt(s);
}

TEST(HadamardRotation, TailPiecesArePowersOfTwoLargestFirst) {
  EXPECT_EQ(kernels::rotation_pieces_per_row(200, 128), 3);
  const int64_t want_start[] = {0, 128, 192};
  const int want_len[] = {128, 64, 8};
  for (int p = 0; p < 3; ++p) {
    int64_t start = -1;
    int len = 0;
    kernels::rotation_piece(200, 128, p, &start, &len);
    EXPECT_EQ(start, want_start[p]);
    EXPECT_EQ(len, want_len[p]);
  }
  EXPECT_EQ(kernels::rotation_pieces_per_row(256, 128), 2);
  EXPECT_EQ(kernels::rotation_pieces_per_row(7, 32), 3);  // 4 + 2 + 1
  for (int b : {2, 4, 128, 256}) EXPECT_TRUE(kernels::rotation_block_ok(b));
  for (int b : {0, 1, 3, 96, 512}) EXPECT_FALSE(kernels::rotation_block_ok(b));
}

TEST(HadamardRotation, FastTransformIsTheDenseProductAndRotatesBackWithin1e6) {
  const std::pair<int64_t, int64_t> shapes[] = {{4, 256}, {3, 200}, {5, 48}, {2, 1}, {3, 7}, {2, 1000}};
  for (int block : {2, 8, 32, 128, 256})
    for (auto [r, c] : shapes) {
      auto x = gaussian(size_t(r * c), uint32_t(block * 7 + c));
      x[0] = 300.0f;  // an outlier
      std::vector<float> fast(x.size()), ref(x.size()), back(x.size());
      kernels::rotate_rows(x.data(), fast.data(), r, c, block, 1234, false);
      kernels::rotate_rows_reference(x.data(), ref.data(), r, c, block, 1234, false);
      kernels::rotate_rows(fast.data(), back.data(), r, c, block, 1234, true);
      const std::string what = std::to_string(r) + "x" + std::to_string(c) + " block " + std::to_string(block);
      for (int64_t i = 0; i < r; ++i) {
        const float* xi = x.data() + i * c;
        const double nx = norm(xi, c);
        // The simple twin (double), the orthogonality, and the exact inverse in fp32.
        EXPECT_LE(distance(fast.data() + i * c, ref.data() + i * c, c), 1e-6 * nx) << what << " row " << i;
        EXPECT_NEAR(norm(fast.data() + i * c, c), nx, 1e-6 * nx) << what << " row " << i;
        EXPECT_LE(distance(back.data() + i * c, xi, c), 1e-6 * nx) << what << " row " << i;
        for (int64_t j = 0; j < c; ++j) EXPECT_NEAR(back[size_t(i * c + j)], xi[j], 1e-6 * nx) << what;
      }
      // The reference's inverse rotates the reference's output back too.
      kernels::rotate_rows_reference(ref.data(), back.data(), r, c, block, 1234, true);
      EXPECT_LE(distance(back.data(), x.data(), r * c), 1e-6 * norm(x.data(), r * c)) << what;
    }
}

TEST(HadamardRotation, InPlaceEqualsOutOfPlaceAndSpreadsAnOutlier) {
  const int64_t r = 3, c = 128;
  std::vector<float> x(size_t(r * c), 0.0f), out(x.size());
  x[5] = 64.0f;
  kernels::rotate_rows(x.data(), out.data(), r, c, 64, 9, false);
  std::vector<float> inplace = x;
  kernels::rotate_rows(inplace.data(), inplace.data(), r, c, 64, 9, false);
  EXPECT_EQ(std::memcmp(out.data(), inplace.data(), out.size() * 4), 0);
  // One spike of 64 in a piece of 64: every entry of that piece is +-64 / 8 = +-8 exactly (64 = 4^3: exact scale).
  for (int j = 0; j < 64; ++j) EXPECT_EQ(std::fabs(out[size_t(j)]), 8.0f) << j;
  for (int j = 64; j < 128; ++j) EXPECT_EQ(out[size_t(j)], 0.0f) << j;
}

TEST(HadamardRotation, SignsDependOnKeyAndPlaceOnly) {
  int differ = 0, total = 0;
  for (int64_t row = 0; row < 4; ++row)
    for (int64_t col = 0; col < 300; ++col, ++total) {
      const bool s = kernels::rotation_sign_negative(5, row, col);
      differ += s != kernels::rotation_sign_negative(6, row, col);
    }
  // Another key draws other signs: about half differ.
  EXPECT_GT(differ, total / 3);
  EXPECT_LT(differ, 2 * total / 3);
  // The block size does not change an entry's sign: a unit vector e_j rotates to d_j / sqrt(B)
  // at its piece's first column (H's first row is all ones), for B = 2 and 256 alike.
  for (int64_t j : {0, 5, 130, 255})
    for (int block : {2, 256}) {
      std::vector<float> x(256, 0.0f), y(256);
      x[size_t(j)] = 1.0f;
      kernels::rotate_rows(x.data(), y.data(), 1, 256, block, 77, false);
      const float first = y[size_t(j / block * block)];
      EXPECT_EQ(first < 0, kernels::rotation_sign_negative(77, 0, j)) << j << " block " << block;
    }
}

// A rotated link: what the receiver decodes is what the sender's codec decodes,
// because both derive the signs from the link and the message id.
TEST(RotatedCompressor, PipelineSenderAndReceiverDeriveTheSameRotation) {
  const int64_t r = 32, c = 96;
  auto x = gaussian(size_t(r * c), 4);
  auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    return std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
  };
  for (CompressionMethod m : {CompressionMethod::Mxfp4, CompressionMethod::LloydMax2, CompressionMethod::Int2}) {
    ParallelLayout first, second;
    first.pp_size = second.pp_size = 2;
    first.pp_rank = 0, second.pp_rank = 1;
    // Forward: stage 0 sends, stage 1 receives.
    ActivationCompressionConfig cfg{.enabled = true, .method = m, .rotation = 32};
    auto sender = make_activation_links(cfg, first, r, c, 1234);
    auto receiver = make_activation_links(cfg, second, r, c, 1234);
    ASSERT_TRUE(sender.send && receiver.recv);
    std::vector<float> wire(size_t(sender.send->wire_floats())), at_sender(x.size()), at_receiver(x.size()),
        other(x.size());
    const MessageId id{7, 2, 0};
    sender.send->encode(x.data(), wire.data(), id);
    sender.send->decode(wire.data(), int64_t(wire.size()), at_sender.data(), id);
    receiver.recv->decode(wire.data(), int64_t(wire.size()), at_receiver.data(), id);
    EXPECT_TRUE(same(at_sender, at_receiver)) << method_name(m) << " forward";
    EXPECT_LT(distance(at_receiver.data(), x.data(), r * c), 0.7 * norm(x.data(), r * c)) << method_name(m);
    // Decoded under another message's signs, it is not the message.
    receiver.recv->decode(wire.data(), int64_t(wire.size()), other.data(), MessageId{7, 3, 0});
    EXPECT_GT(distance(other.data(), x.data(), r * c), 1.0 * norm(x.data(), r * c)) << method_name(m);
    // Backward: stage 1 sends (with LEP), stage 0 receives.
    CompressedBackpropConfig cb;
    cb.enabled = true, cb.method = m, cb.rotation = 32, cb.lazy_error = true;
    auto back_sender = make_backprop_links(cb, second, r, c, 1234);
    auto back_receiver = make_backprop_links(cb, first, r, c, 1234);
    ASSERT_TRUE(back_sender.send[0] && back_receiver.recv[0]);
    back_sender.send[0]->encode(x.data(), wire.data(), id);
    back_sender.send[0]->decode(wire.data(), int64_t(wire.size()), at_sender.data(), id);
    back_receiver.recv[0]->decode(wire.data(), int64_t(wire.size()), at_receiver.data(), id);
    EXPECT_TRUE(same(at_sender, at_receiver)) << method_name(m) << " backward";
    EXPECT_LT(distance(at_receiver.data(), x.data(), r * c), 0.7 * norm(x.data(), r * c)) << method_name(m);
  }
}

TEST(RotatedCompressor, KeysByMessageAndTensor) {
  const int64_t r = 8, c = 64;
  const CompressorSpec spec{CompressionMethod::LloydMax3, 0, 0, false, 64};
  auto a = make_compressor(spec, r, c, 1, 2), b = make_compressor(spec, r, c, 1, 2), t = make_compressor(spec, r, c, 1, 3);
  auto* ra = dynamic_cast<RotatedCompressor*>(a.get());
  auto* rb = dynamic_cast<RotatedCompressor*>(b.get());
  auto* rt = dynamic_cast<RotatedCompressor*>(t.get());
  ASSERT_TRUE(ra && rb && rt);
  EXPECT_EQ(ra->block(), 64);
  EXPECT_EQ(ra->rotation_key(), rb->rotation_key());  // two ranks of a group
  EXPECT_NE(ra->rotation_key(), rt->rotation_key());  // another tensor
  ra->set_message_key(5);
  EXPECT_NE(ra->rotation_key(), rb->rotation_key());
  rb->set_message_key(5);
  EXPECT_EQ(ra->rotation_key(), rb->rotation_key());  // the same iteration
  // Stateless (its key comes from the iteration); the wire is the inner codec's, nothing extra.
  EXPECT_FALSE(a->stateful());
  EXPECT_EQ(a->wire_floats(), compressed_wire_floats({CompressionMethod::LloydMax3}, r, c));
  EXPECT_THROW(RotatedCompressor(make_compressor({CompressionMethod::Int2}, r, c, 1, 2), 48, 1, 2), Error);
}

// ---- the table codes ------------------------------------------------------------------

// The conditional mean of N(0, 1) on (a, b): (phi(a) - phi(b)) / (Phi(b) - Phi(a)).
double gaussian_mean_between(double a, double b) {
  auto phi = [](double x) { return std::isinf(x) ? 0.0 : std::exp(-x * x / 2) / std::sqrt(2 * M_PI); };
  auto Phi = [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); };
  return (phi(a) - phi(b)) / (Phi(b) - Phi(a));
}

TEST(TableCodes, LloydMaxLevelsAreTheGaussianMeansBetweenTheirThresholds) {
  for (BlockCode code : {BlockCode::Lm2, BlockCode::Lm3}) {
    const int K = kernels::table_levels(code);
    for (int k = 0; k < K; ++k) {
      const double lo = k == 0 ? -INFINITY : double(kernels::table_threshold(code, k - 1));
      const double hi = k + 1 == K ? INFINITY : double(kernels::table_threshold(code, k));
      EXPECT_NEAR(kernels::table_level(code, k), gaussian_mean_between(lo, hi), 1e-6) << int(code) << " level " << k;
      EXPECT_EQ(kernels::table_level(code, k), -kernels::table_level(code, K - 1 - k));
    }
  }
  // Max's published values (Max 1960), 4 decimals.
  EXPECT_NEAR(kernels::table_level(BlockCode::Lm2, 3), 1.5104, 1e-4);
  EXPECT_NEAR(kernels::table_level(BlockCode::Lm3, 7), 2.1520, 1e-4);
  EXPECT_NEAR(kernels::table_threshold(BlockCode::Lm2, 2), 0.9816, 1e-4);
  EXPECT_NEAR(kernels::table_threshold(BlockCode::Lm3, 6), 1.7480, 1e-3);
}

std::vector<uint8_t> wire_bytes(MatrixCompressor& q, const std::vector<float>& x) {
  std::vector<float> wire(size_t(q.wire_floats()));
  q.encode(x.data(), wire.data());
  std::vector<uint8_t> bytes(wire.size() * 4);
  std::memcpy(bytes.data(), wire.data(), bytes.size());
  return bytes;
}

TEST(TableCodes, HandWorkedBlocks) {
  // int2: max |x| = 3 -> s = 2 (bf16 exact); v = x / 2 against thresholds -1, 0, 1.
  std::vector<float> x(64, 0.0f);
  x[0] = 3.0f, x[1] = -3.0f, x[2] = 0.5f, x[3] = -0.5f, x[4] = 2.0f, x[5] = -2.0f;  // v = 1.5 -1.5 .25 -.25 1 -1
  BlockCompressor int2(1, 64, BlockCode::Int2, false, 0, 0);
  auto b = wire_bytes(int2, x);
  ASSERT_EQ(b.size(), 20u);  // 2 + 16 = 18 bytes, padded to 20
  EXPECT_EQ(b[0] | (b[1] << 8), 0x4000);  // bf16 2.0
  // codes 3 0 2 1 | 3 (1.0 on a threshold: upper) 1 (-1.0: upper) 2 (0.0: upper) 2 ...
  EXPECT_EQ(b[2], 3 | (0 << 2) | (2 << 4) | (1 << 6));
  EXPECT_EQ(b[3], 3 | (1 << 2) | (2 << 4) | (2 << 6));
  EXPECT_EQ(b[18], 0);
  EXPECT_EQ(b[19], 0);
  std::vector<float> out(64);
  std::vector<float> wire(5);
  std::memcpy(wire.data(), b.data(), 20);
  int2.decode(wire.data(), out.data());
  EXPECT_EQ(out[0], 3.0f);
  EXPECT_EQ(out[2], 1.0f);
  EXPECT_EQ(out[3], -1.0f);
  EXPECT_EQ(out[6], 1.0f);  // a zero decodes to +0.5 s (a mid-rise code has no zero)
  // lloydmax2: 64 entries of +-1 -> RMS 1 -> s = 1; v = +-1 > 0.9816: codes 3 / 0, values +-1.5104176.
  for (int j = 0; j < 64; ++j) x[size_t(j)] = j % 2 ? -1.0f : 1.0f;
  BlockCompressor lm2(1, 64, BlockCode::Lm2, false, 0, 0);
  b = wire_bytes(lm2, x);
  EXPECT_EQ(b[0] | (b[1] << 8), 0x3f80);  // bf16 1.0
  EXPECT_EQ(b[2], 3 | (0 << 2) | (3 << 4) | (0 << 6));
  std::memcpy(wire.data(), b.data(), 20);
  lm2.decode(wire.data(), out.data());
  EXPECT_EQ(out[0], kernels::table_level(BlockCode::Lm2, 3));
  EXPECT_EQ(out[1], -kernels::table_level(BlockCode::Lm2, 3));
  // lloydmax3 on a ramp: every code is the nearest level of x / s.
  for (int j = 0; j < 64; ++j) x[size_t(j)] = float(j - 32) / 16.0f;
  BlockCompressor lm3(1, 64, BlockCode::Lm3, false, 0, 0);
  std::vector<float> w3(size_t(lm3.wire_floats()));
  lm3.encode(x.data(), w3.data());
  lm3.decode(w3.data(), out.data());
  const float s = bf16_value(
      uint16_t(reinterpret_cast<uint8_t*>(w3.data())[0] | (reinterpret_cast<uint8_t*>(w3.data())[1] << 8)));
  for (int j = 0; j < 64; ++j) {
    const float v = x[size_t(j)] / s;
    float best = 0, gap = INFINITY;
    for (int k = 0; k < 8; ++k)  // (<=: a tie, here x = 0 between -0.245 and 0.245, takes the upper level)
      if (std::fabs(v - kernels::table_level(BlockCode::Lm3, k)) <= gap)
        gap = std::fabs(v - kernels::table_level(BlockCode::Lm3, k)), best = kernels::table_level(BlockCode::Lm3, k);
    EXPECT_EQ(out[size_t(j)], best * s) << j;
  }
}

TEST(TableCodes, BytesPerValueWithScalesAndPadding) {
  // 64-entry blocks: int2 / lloydmax2 2 + 16 bytes, lloydmax3 2 + 24; a row of 100 is two blocks (28 padded).
  EXPECT_EQ(BlockCompressor::wire_bytes(BlockCode::Int2, 3, 100), 3 * 2 * 18);
  EXPECT_EQ(BlockCompressor::wire_bytes(BlockCode::Lm2, 3, 100), 3 * 2 * 18);
  EXPECT_EQ(BlockCompressor::wire_bytes(BlockCode::Lm3, 3, 100), 3 * 2 * 26);
  EXPECT_EQ(BlockCompressor::wire_bytes(BlockCode::Lm3, 1, 64), 26);
  EXPECT_EQ(compressed_wire_floats({CompressionMethod::LloydMax3}, 1, 64), 7);  // 26 bytes in 7 words
  EXPECT_EQ(compressed_wire_floats({CompressionMethod::Int2, 0, 0, false, 128}, 5, 256), 5 * 4 * 18 / 4);
}

TEST(TableCodes, StochasticRoundingIsUnbiasedBetweenNeighbours) {
  // One block whose RMS fixes s = 1 (bf16 exact): 32 entries of +-1.4 and the
  // rest chosen so that sum x^2 / 64 = 1; entry 0 = 0.6 lies between 0.4528 and 1.5104.
  for (BlockCode code : {BlockCode::Lm2, BlockCode::Int2}) {
    double mean = 0;
    const int trials = 4000;
    std::vector<float> x(64, 0.0f);
    x[0] = 0.6f;
    x[1] = code == BlockCode::Int2 ? 1.5f : 0.0f;  // int2: s = max / 1.5 = 1
    if (code == BlockCode::Lm2) {
      double rest = 64.0 - 0.36;
      for (int j = 1; j < 64; ++j) x[size_t(j)] = float(std::sqrt(rest / 63.0)) * (j % 2 ? 1.0f : -1.0f);
    }
    BlockCompressor q(1, 64, code, true, 3, 4);
    std::vector<float> wire(size_t(q.wire_floats())), out(64);
    for (int t = 0; t < trials; ++t) {
      q.set_message_key(uint64_t(t));
      q.encode(x.data(), wire.data());
      q.decode(wire.data(), out.data());
      const float s = bf16_value(uint16_t(reinterpret_cast<uint8_t*>(wire.data())[0] |
                                                   (reinterpret_cast<uint8_t*>(wire.data())[1] << 8)));
      const float lo = code == BlockCode::Int2 ? 0.5f : kernels::table_level(code, 2);
      const float hi = code == BlockCode::Int2 ? 1.5f : kernels::table_level(code, 3);
      EXPECT_TRUE(out[0] == lo * s || out[0] == hi * s) << out[0];
      mean += out[0];
    }
    EXPECT_NEAR(mean / trials, 0.6, 0.03) << int(code);
  }
}

TEST(TableCodes, NonFiniteBlocksDecodeToNanAlsoRotated) {
  for (int rotation : {0, 128}) {
    const int64_t r = 2, c = 256;
    auto x = gaussian(size_t(r * c), 8);
    x[size_t(c + 10)] = std::nanf("");
    for (CompressionMethod m : {CompressionMethod::Int2, CompressionMethod::LloydMax2, CompressionMethod::LloydMax3}) {
      auto q = make_compressor({m, 0, 0, false, rotation}, r, c, 1, 2);
      std::vector<float> wire(size_t(q->wire_floats())), out(x.size());
      q->encode(x.data(), wire.data());
      q->decode(wire.data(), out.data());
      int nans = 0;
      for (int64_t j = 0; j < c; ++j) {
        EXPECT_TRUE(std::isfinite(out[size_t(j)])) << method_name(m);  // the other row
        nans += std::isnan(out[size_t(c + j)]);
      }
      // Unrotated: the NaN's block of 64 decodes to NaN; rotated, its piece of 128 (spread first).
      EXPECT_EQ(nans, rotation ? 128 : 64) << method_name(m) << " rotation " << rotation;
    }
  }
}

// What the rotation is for: a message whose rows carry a few large outliers
// (as activations do) loses less to a 2-bit code once rotated.
TEST(TableCodes, RotationCutsTheErrorOfAMessageWithOutliers) {
  const int64_t r = 64, c = 256;
  auto x = gaussian(size_t(r * c), 21);
  for (int64_t i = 0; i < r; ++i) x[size_t(i * c + (i * 37) % c)] = 40.0f;
  for (CompressionMethod m : {CompressionMethod::LloydMax2, CompressionMethod::Int2, CompressionMethod::Mxfp4}) {
    double err[2];
    for (int rotated = 0; rotated < 2; ++rotated) {
      auto q = make_compressor({m, 0, 0, false, rotated ? 128 : 0}, r, c, 1, 2);
      std::vector<float> wire(size_t(q->wire_floats())), out(x.size());
      q->encode(x.data(), wire.data());
      q->decode(wire.data(), out.data());
      err[rotated] = distance(out.data(), x.data(), r * c) / norm(x.data(), r * c);
    }
    EXPECT_LT(err[1], err[0]) << method_name(m) << ": rotated " << err[1] << " vs " << err[0];
  }
}

TEST(Rotation, FlagValues) {
  EXPECT_EQ(parse_rotation("none", "--x"), 0);
  EXPECT_EQ(parse_rotation("hadamard", "--x"), 128);
  EXPECT_EQ(parse_rotation("hadamard:32", "--x"), 32);
  EXPECT_EQ(parse_rotation("hadamard:256", "--x"), 256);
  for (const char* bad : {"hadamard:48", "hadamard:512", "hadamard:1", "hadamard:", "hadamard:x", "walsh", "hadamard:99999"})
    EXPECT_THROW(parse_rotation(bad, "--x"), UsageError) << bad;
  EXPECT_EQ(rotation_name(64), "hadamard:64");
  EXPECT_EQ(describe({CompressionMethod::LloydMax2, 0, 0, true, 128}), "lloydmax2 rotated 128 stochastic");
}

}  // namespace
}  // namespace occ
