// Byte-format compressors (compress/{int8,fp8,topk,sign}_compressor.h).
//
// Facts checked:
//   * (the fp8 conversions themselves: test_fp8.cpp)
//   * every compressor: wire_floats()*4 == its byte formula rounded up to 4;
//     the wire is bitwise deterministic whatever the buffer held (padding is 0).
//   * int8: |x - x_hat| <= scale/2 per entry; fp8: the per-row scale maps the
//     row max onto the largest code and the codes are the conversion of x/scale.
//   * topk: exactly the k largest |x| kept (ties to the lower column), values exact,
//     both wire formats laid out as documented; fraction 1 is lossless.
//   * sign: decode is +-mean|x|, zero sends +; under ErrorFeedback the decoded
//     messages track the running sum of the inputs with a bounded residual.
//   * ErrorFeedback at a lossless setting leaves a residual of exactly zero.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "compress/block_compressor.h"
#include "compress/error_feedback.h"
#include "compress/fp8_compressor.h"
#include "compress/int8_compressor.h"
#include "compress/powersgd.h"
#include "compress/sign_compressor.h"
#include "compress/topk_compressor.h"
#include "core/error.h"
#include "core/precision.h"
#include "core/tensor_file.h"
#include "temp_dir.h"

#include "compressor_test_util.h"

namespace occ {
namespace {
using namespace occ::test;

// ---- all compressors: byte formulas and deterministic wires --------------------

int64_t round_up4(int64_t bytes) { return (bytes + 3) / 4 * 4; }

struct Made {
  std::unique_ptr<MatrixCompressor> c;
  int64_t formula_bytes;
};
using Factory = std::function<Made(int64_t, int64_t)>;

std::vector<std::pair<const char*, Factory>> all_compressors() {
  return {
      {"int8", [](int64_t r, int64_t c) { return Made{std::make_unique<Int8Compressor>(r, c), 4 * r + r * c}; }},
      {"fp8-e4m3",
       [](int64_t r, int64_t c) { return Made{std::make_unique<Fp8Compressor>(r, c, Fp8Format::E4M3), 4 * r + r * c}; }},
      {"fp8-e5m2",
       [](int64_t r, int64_t c) { return Made{std::make_unique<Fp8Compressor>(r, c, Fp8Format::E5M2), 4 * r + r * c}; }},
      {"sign",
       [](int64_t r, int64_t c) { return Made{std::make_unique<SignCompressor>(r, c), 4 * r + (r * c + 7) / 8}; }},
      {"topk-0.3",
       [](int64_t r, int64_t c) {
         auto t = std::make_unique<TopkCompressor>(r, c, 0.3);
         const int64_t k = std::max<int64_t>(1, std::llround(0.3 * c));
         const int64_t idx = 8 * r * k, map = 4 * r * k + r * ((c + 7) / 8);
         return Made{std::move(t), round_up4(map) < idx ? map : idx};
       }},
      // The block methods (their own tests: test_block_compressor.cpp); nb blocks per row.
      {"mxfp4",
       [](int64_t r, int64_t c) {
         return Made{std::make_unique<BlockCompressor>(r, c, kernels::BlockCode::Mxfp4, false, 1, 2),
                     17 * r * ((c + 31) / 32)};
       }},
      {"nvfp4-stochastic",
       [](int64_t r, int64_t c) {
         return Made{std::make_unique<BlockCompressor>(r, c, kernels::BlockCode::Nvfp4, true, 1, 2),
                     4 * r + 9 * r * ((c + 15) / 16)};
       }},
      {"int4",
       [](int64_t r, int64_t c) {
         return Made{std::make_unique<BlockCompressor>(r, c, kernels::BlockCode::Int4, false, 1, 2),
                     18 * r * ((c + 31) / 32)};
       }},
      {"int3-stochastic",
       [](int64_t r, int64_t c) {
         return Made{std::make_unique<BlockCompressor>(r, c, kernels::BlockCode::Int3, true, 1, 2),
                     14 * r * ((c + 31) / 32)};
       }},
      {"topk-0.01",
       [](int64_t r, int64_t c) {
         const int64_t k = std::max<int64_t>(1, std::llround(0.01 * c));
         const int64_t idx = 8 * r * k, map = 4 * r * k + r * ((c + 7) / 8);
         return Made{std::make_unique<TopkCompressor>(r, c, 0.01), round_up4(map) < idx ? map : idx};
       }},
  };
}

TEST(CompressorWire, ByteCountEqualsFormula) {
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1}, {1, 3}, {3, 5}, {7, 13}, {2, 9}, {64, 64}, {5, 1000}};
  for (const auto& [name, make] : all_compressors())
    for (auto [r, c] : shapes) {
      Made m = make(r, c);
      EXPECT_EQ(m.c->wire_floats() * 4, round_up4(m.formula_bytes)) << name << " " << r << "x" << c;
    }
}

TEST(CompressorWire, DeterministicWhateverTheBufferHeld) {
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1}, {3, 5}, {7, 13}, {33, 70}};
  for (const auto& [name, make] : all_compressors())
    for (auto [r, c] : shapes) {
      Made m = make(r, c);
      const auto x = gaussian(size_t(r * c), uint32_t(r * 100 + c));
      std::vector<float> a(size_t(m.c->wire_floats())), b(a.size());
      std::memset(a.data(), 0xab, a.size() * 4);
      std::memset(b.data(), 0x5c, b.size() * 4);
      m.c->encode(x.data(), a.data());
      m.c->encode(x.data(), b.data());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << name << " " << r << "x" << c;
      const int64_t pad = m.c->wire_floats() * 4 - m.formula_bytes;
      for (int64_t p = 0; p < pad; ++p)
        EXPECT_EQ(reinterpret_cast<const unsigned char*>(a.data())[m.formula_bytes + p], 0) << name << " padding";
    }
}

// Every method works row by row: a large matrix (encoded by the OpenMP path)
// decodes to exactly what its rows, each compressed alone, decode to.
TEST(CompressorWire, LargeMatrixEqualsItsRowsAlone) {
  const int64_t r = 300, c = 257;
  const auto x = gaussian(size_t(r * c), 21);
  for (const auto& [name, make] : all_compressors()) {
    // (Stochastic rounding draws its bits by the block's position in the message: a row alone draws others.)
    if (std::string(name).find("stochastic") != std::string::npos) continue;
    Made whole = make(r, c), row = make(1, c);
    std::vector<float> wire(size_t(whole.c->wire_floats())), out(x.size());
    whole.c->encode(x.data(), wire.data());
    whole.c->decode(wire.data(), out.data());
    std::vector<float> rw(size_t(row.c->wire_floats())), ro(static_cast<size_t>(c));
    for (int64_t i = 0; i < r; ++i) {
      row.c->encode(x.data() + i * c, rw.data());
      row.c->decode(rw.data(), ro.data());
      ASSERT_EQ(std::memcmp(ro.data(), out.data() + i * c, size_t(c) * 4), 0) << name << " row " << i;
    }
  }
}

// Stateless: nothing saved, any file loads "completely", and ErrorFeedback's
// residual (its only state) carries the run on bit-exactly after a reload.
TEST(CompressorWire, StatelessStateRoundTripsUnderErrorFeedback) {
  const int64_t r = 6, c = 20;
  const auto x1 = gaussian(size_t(r * c), 1), x2 = gaussian(size_t(r * c), 2);
  for (const auto& [name, make] : all_compressors()) {
    ErrorFeedback a(make(r, c).c);
    std::vector<float> wa(size_t(a.wire_floats())), wb(wa.size());
    a.encode(x1.data(), wa.data());
    test::TempDir dir;
    TensorFileWriter w(nlohmann::json{{"what", "test"}});
    make(r, c).c->save_state(w, "inner/");  // writes nothing
    a.save_state(w, "ef/");
    w.write(dir.file("state.bin"));
    TensorFileReader file = TensorFileReader::open(dir.file("state.bin"));
    EXPECT_EQ(file.names(), std::vector<std::string>{"ef/error"}) << name;
    EXPECT_TRUE(make(r, c).c->load_state(file, "inner/")) << name;
    ErrorFeedback b(make(r, c).c);
    EXPECT_TRUE(b.load_state(file, "ef/")) << name;
    a.encode(x2.data(), wa.data());
    b.encode(x2.data(), wb.data());
    EXPECT_EQ(std::memcmp(wa.data(), wb.data(), wa.size() * 4), 0) << name;
  }
}

TEST(CompressorWire, BadShapesAndFractionsThrow) {
  EXPECT_THROW(Int8Compressor(0, 4), Error);
  EXPECT_THROW(Fp8Compressor(3, -1, Fp8Format::E4M3), Error);
  EXPECT_THROW(SignCompressor(0, 0), Error);
  EXPECT_THROW(TopkCompressor(0, 4, 0.5), Error);
  for (double f : {0.0, -0.1, 1.5, std::nan("")}) {
    try {
      TopkCompressor(4, 4, f);
      ADD_FAILURE() << "fraction " << f << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("fraction must be in (0, 1]"), std::string::npos) << e.what();
    }
  }
}

// ---- int8 ------------------------------------------------------------------

TEST(Int8Compressor, ErrorAtMostHalfAScale) {
  const int64_t r = 9, c = 77;
  auto x = gaussian(size_t(r * c), 3);
  for (int64_t j = 0; j < c; ++j) x[size_t(2 * c + j)] = 0.0f;      // a zero row
  for (int64_t j = 0; j < c; ++j) x[size_t(3 * c + j)] *= 1e-30f;  // a tiny row
  for (int64_t j = 0; j < c; ++j) x[size_t(4 * c + j)] *= 1e30f;   // a huge row
  Int8Compressor q(r, c);
  std::vector<float> wire(size_t(q.wire_floats())), out(x.size());
  q.encode(x.data(), wire.data());
  q.decode(wire.data(), out.data());
  const auto* codes = reinterpret_cast<const int8_t*>(wire.data()) + 4 * r;
  for (int64_t i = 0; i < r; ++i) {
    float absmax = 0.0f;
    for (int64_t j = 0; j < c; ++j) absmax = std::max(absmax, std::fabs(x[size_t(i * c + j)]));
    const float scale = wire[size_t(i)];
    EXPECT_EQ(scale, absmax / 127.0f) << "row " << i;
    int max_code = 0;
    for (int64_t j = 0; j < c; ++j) {
      const size_t p = size_t(i * c + j);
      max_code = std::max(max_code, std::abs(int(codes[p])));
      EXPECT_EQ(out[p], float(codes[p]) * scale);
      // Slack: x/scale and code*scale are each rounded once in fp32, on values
      // of magnitude <= ~127*scale, so each adds <= 127*scale*2^-24 < scale*2^-17.
      EXPECT_LE(std::fabs(double(x[p]) - double(out[p])), double(scale) * (0.5 + std::ldexp(1.0, -16)))
          << "row " << i << " col " << j;
    }
    EXPECT_EQ(max_code, absmax > 0 ? 127 : 0) << "the row max maps to +-127";
  }
}

// ---- fp8 -------------------------------------------------------------------

TEST(Fp8Compressor, CodesAreTheConversionOfTheScaledRow) {
  const int64_t r = 6, c = 50;
  auto x = gaussian(size_t(r * c), 4, 0.01f);
  for (int64_t j = 0; j < c; ++j) x[size_t(c + j)] = 0.0f;
  for (Fp8Format fmt : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    const Fp8Case& f = fmt == Fp8Format::E4M3 ? kE4m3 : kE5m2;
    Fp8Compressor q(r, c, fmt);
    std::vector<float> wire(size_t(q.wire_floats())), out(x.size());
    q.encode(x.data(), wire.data());
    q.decode(wire.data(), out.data());
    const auto* codes = reinterpret_cast<const uint8_t*>(wire.data()) + 4 * r;
    for (int64_t i = 0; i < r; ++i) {
      float absmax = 0.0f;
      for (int64_t j = 0; j < c; ++j) absmax = std::max(absmax, std::fabs(x[size_t(i * c + j)]));
      const float scale = wire[size_t(i)];
      EXPECT_EQ(scale, absmax / fp8_max_finite(fmt)) << f.name;
      bool has_max = absmax == 0;
      for (int64_t j = 0; j < c; ++j) {
        const size_t p = size_t(i * c + j);
        if (scale > 0) {
          EXPECT_EQ(codes[p], f.encode(x[p] / scale)) << f.name;
        }
        EXPECT_EQ(out[p], f.decode(codes[p]) * scale) << f.name;
        has_max |= (codes[p] & 0x7f) == f.max_code;
        // Relative error of RNE with m mantissa bits: <= 2^-(m+1) (normal range),
        // or half the smallest subnormal step; plus the fp32 division / product.
        const double sub = double(scale) * std::ldexp(1.0, (f.mbits == 3 ? -10 : -17));
        const double bound = std::max(std::fabs(double(x[p])) * std::ldexp(1.0, -(f.mbits + 1)), sub);
        EXPECT_LE(std::fabs(double(x[p]) - out[p]), bound * (1 + 1e-6) + std::fabs(double(x[p])) * 1e-6) << f.name;
      }
      EXPECT_TRUE(has_max) << f.name << ": the row max uses the largest code";
    }
  }
}

// ---- topk ------------------------------------------------------------------

TEST(TopkCompressor, KIsTheRoundedFraction) {
  EXPECT_EQ(TopkCompressor::k_for(1000, 0.01), 10);
  EXPECT_EQ(TopkCompressor::k_for(10, 0.01), 1);  // at least one
  EXPECT_EQ(TopkCompressor::k_for(10, 0.26), 3);
  EXPECT_EQ(TopkCompressor::k_for(10, 1.0), 10);
  EXPECT_EQ(TopkCompressor(4, 1000, 0.01).format(), TopkFormat::Indices);  // 80 B/row vs 40+125
  EXPECT_EQ(TopkCompressor(4, 64, 0.5).format(), TopkFormat::Bitmap);      // 256 B/row vs 128+8
}

// Reference: columns ordered by |x| descending, then column ascending; first k.
std::vector<float> topk_reference(const std::vector<float>& x, int64_t r, int64_t c, int64_t k) {
  std::vector<float> out(x.size(), 0.0f);
  for (int64_t i = 0; i < r; ++i) {
    std::vector<int64_t> cols(static_cast<size_t>(c));
    for (int64_t j = 0; j < c; ++j) cols[size_t(j)] = j;
    std::stable_sort(cols.begin(), cols.end(),
                     [&](int64_t a, int64_t b) { return std::fabs(x[size_t(i * c + a)]) > std::fabs(x[size_t(i * c + b)]); });
    for (int64_t t = 0; t < k; ++t) out[size_t(i * c + cols[size_t(t)])] = x[size_t(i * c + cols[size_t(t)])];
  }
  return out;
}

TEST(TopkCompressor, KeepsExactlyTheLargest) {
  const int64_t r = 8, c = 61;
  std::mt19937 gen(5);
  std::uniform_int_distribution<int> small(-6, 6);  // many ties in |x|
  std::vector<float> ties(size_t(r * c));
  for (auto& v : ties) v = float(small(gen)) * 0.25f;
  const auto smooth = gaussian(size_t(r * c), 6);
  for (const std::vector<float>* x : {static_cast<const std::vector<float>*>(&ties), &smooth}) {
    for (double frac : {0.01, 0.05, 0.2, 0.5, 0.9}) {
      TopkCompressor t(r, c, frac);
      std::vector<float> wire(size_t(t.wire_floats())), out(x->size());
      t.encode(x->data(), wire.data());
      t.decode(wire.data(), out.data());
      const auto want = topk_reference(*x, r, c, t.k());
      for (size_t p = 0; p < out.size(); ++p)
        ASSERT_EQ(bits_of(out[p]), bits_of(want[p])) << "fraction " << frac << " entry " << p;
    }
  }
}

TEST(TopkCompressor, WireLayoutsAsDocumented) {
  const auto x = gaussian(3 * 13, 8);
  // Indices: rows*k values, then rows*k int32 columns, ascending within a row.
  TopkCompressor ti(3, 13, 0.1);  // k = 1: 8 B/row vs 4 + 2
  ASSERT_EQ(ti.k(), 1);
  ASSERT_EQ(ti.format(), TopkFormat::Bitmap);  // 6 B/row * 3 = 18 -> 20 < 24
  EXPECT_EQ(ti.wire_floats(), 5);
  TopkCompressor tx(2, 200, 0.02);  // k = 4: 32 B/row vs 16 + 25
  ASSERT_EQ(tx.format(), TopkFormat::Indices);
  EXPECT_EQ(tx.wire_floats(), 2 * 4 * 2);
  const auto y = gaussian(2 * 200, 9);
  std::vector<float> wire(size_t(tx.wire_floats()));
  tx.encode(y.data(), wire.data());
  const auto want = topk_reference(y, 2, 200, 4);
  for (int64_t i = 0; i < 2; ++i) {
    int32_t prev = -1;
    for (int64_t t = 0; t < 4; ++t) {
      int32_t col;
      std::memcpy(&col, reinterpret_cast<const unsigned char*>(wire.data()) + 4 * (2 * 4 + i * 4 + t), 4);
      EXPECT_GT(col, prev);
      prev = col;
      EXPECT_EQ(wire[size_t(i * 4 + t)], y[size_t(i * 200 + col)]);
      EXPECT_NE(want[size_t(i * 200 + col)], 0.0f);
    }
  }
  // Bitmap: rows*k values, then per row ceil(cols/8) bytes, LSB first.
  TopkCompressor tb(3, 13, 0.5);  // k = 7 (6.5 rounds up): 56 B/row vs 28 + 2
  ASSERT_EQ(tb.format(), TopkFormat::Bitmap);
  EXPECT_EQ(tb.k(), 7);
  EXPECT_EQ(tb.wire_floats() * 4, round_up4(3 * (28 + 2)));
  std::vector<float> wb(size_t(tb.wire_floats()));
  tb.encode(x.data(), wb.data());
  const auto wantb = topk_reference(x, 3, 13, 7);
  const auto* maps = reinterpret_cast<const unsigned char*>(wb.data()) + 4 * 3 * 7;
  for (int64_t i = 0; i < 3; ++i) {
    int64_t t = 0;
    for (int64_t j = 0; j < 13; ++j) {
      const bool kept = (maps[i * 2 + j / 8] >> (j % 8)) & 1;
      EXPECT_EQ(kept, wantb[size_t(i * 13 + j)] != 0.0f) << i << "," << j;
      if (kept) {
        EXPECT_EQ(wb[size_t(i * 7 + t++)], x[size_t(i * 13 + j)]);
      }
    }
    EXPECT_EQ(t, 7);
    EXPECT_EQ(maps[i * 2 + 1] >> 5, 0) << "unused bits of the last byte are 0";
  }
}

TEST(TopkCompressor, FractionOneIsLossless) {
  for (int64_t c : {1, 7, 64, 300}) {
    const auto x = gaussian(size_t(5 * c), uint32_t(c));
    TopkCompressor t(5, c, 1.0);
    std::vector<float> wire(size_t(t.wire_floats())), out(x.size());
    t.encode(x.data(), wire.data());
    t.decode(wire.data(), out.data());
    EXPECT_EQ(std::memcmp(out.data(), x.data(), x.size() * 4), 0) << c;
  }
}

// ---- sign ------------------------------------------------------------------

TEST(SignCompressor, DecodesToPlusMinusMeanAbs) {
  // 3 x 5: the 15 sign bits run over row boundaries (rows are not byte-padded).
  const std::vector<float> x = {1.0f, -2.0f, 0.0f, -0.0f, 4.0f,   // mean |x| = 7/5
                                -1.0f, -1.0f, -1.0f, -1.0f, -1.0f,  // 1
                                0.0f, 0.0f, 0.0f, 0.0f, 0.0f};       // 0
  SignCompressor s(3, 5);
  EXPECT_EQ(s.wire_floats() * 4, round_up4(12 + 2));
  std::vector<float> wire(size_t(s.wire_floats())), out(x.size());
  s.encode(x.data(), wire.data());
  s.decode(wire.data(), out.data());
  EXPECT_EQ(wire[0], 1.4f);
  EXPECT_EQ(wire[1], 1.0f);
  EXPECT_EQ(wire[2], 0.0f);
  const auto* bits = reinterpret_cast<const unsigned char*>(wire.data()) + 12;
  EXPECT_EQ(bits[0], 0b11100010);  // entries 1, 5, 6, 7 negative (LSB first)
  EXPECT_EQ(bits[1], 0b00000011);  // entries 8, 9
  const std::vector<float> want = {1.4f, -1.4f, 1.4f, 1.4f, 1.4f, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0};
  for (size_t p = 0; p < x.size(); ++p) EXPECT_EQ(out[p], want[p]) << p;  // zeros send +scale
}

TEST(SignCompressor, ErrorFeedbackTracksTheRunningSum) {
  const int64_t r = 16, c = 64, steps = 2000;
  ErrorFeedback ef(std::make_unique<SignCompressor>(r, c));
  std::vector<float> wire(size_t(ef.wire_floats())), dec(size_t(r * c));
  std::vector<double> sum_in(dec.size(), 0.0), sum_out(dec.size(), 0.0);
  double worst_residual = 0.0;  // largest row norm of the residual over all steps
  for (int64_t t = 0; t < steps; ++t) {
    const auto g = gaussian(dec.size(), uint32_t(1000 + t));  // row norms ~ sqrt(64) = 8
    ef.encode(g.data(), wire.data());
    ef.decode(wire.data(), dec.data());
    for (size_t p = 0; p < dec.size(); ++p) sum_in[p] += g[p], sum_out[p] += dec[p];
    const std::vector<float> e = ef.residual().to_host();
    for (int64_t i = 0; i < r; ++i) {
      double s = 0;
      for (int64_t j = 0; j < c; ++j) s += double(e[size_t(i * c + j)]) * e[size_t(i * c + j)];
      worst_residual = std::max(worst_residual, std::sqrt(s));
    }
  }
  // Nothing is lost, only delayed: inputs - messages == residual (up to fp32
  // rounding of the per-step sums, ~steps * 2^-24 * |entry|).
  double in_norm = 0;
  const std::vector<float> residual = ef.residual().to_host();
  for (size_t p = 0; p < dec.size(); ++p) {
    EXPECT_NEAR(sum_in[p] - sum_out[p], residual[p], 1e-3) << p;
    in_norm = std::max(in_norm, std::fabs(sum_in[p]));
  }
  // Bounded: with ||x - C(x)|| <= sqrt(1 - d) ||x|| (d = mean|x|^2 / mean x^2,
  // ~2/pi for Gaussian rows) the residual stays below sqrt(1-d)/(1-sqrt(1-d)) ~ 1.5
  // times the largest input row norm (~11 over 32000 rows of chi(64)), i.e. ~17;
  // measured 9.7. 3 row norms (24) leaves room; an unbounded residual would
  // grow like the running sum (~sqrt(steps) * 8 ~ 360).
  EXPECT_LT(worst_residual, 24.0);
  EXPECT_GT(in_norm, 100.0);  // while the running sum itself has grown like sqrt(steps)
}

// ---- error feedback at lossless settings -------------------------------------

TEST(CompressorErrorFeedback, LosslessSettingsLeaveZeroResidual) {
  const int64_t r = 5, c = 40;
  std::mt19937 gen(12);
  std::uniform_int_distribution<int> code(-127, 127);
  for (int step = 0; step < 3; ++step) {
    // int8: integers in [-127, 127] with +-127 in every row: scale 1, exact codes.
    std::vector<float> ints(size_t(r * c));
    for (auto& v : ints) v = float(code(gen));
    for (int64_t i = 0; i < r; ++i) ints[size_t(i * c + (i * 7 + step) % c)] = (i & 1) ? 127.0f : -127.0f;
    const auto smooth = gaussian(size_t(r * c), uint32_t(40 + step));
    struct Case { const char* name; std::unique_ptr<MatrixCompressor> inner; const std::vector<float>* x; };
    Case cases[] = {{"int8", std::make_unique<Int8Compressor>(r, c), &ints},
                    {"topk-1.0", std::make_unique<TopkCompressor>(r, c, 1.0), &smooth}};
    for (auto& k : cases) {
      ErrorFeedback ef(std::move(k.inner));
      std::vector<float> wire(size_t(ef.wire_floats())), out(size_t(r * c));
      ef.encode(k.x->data(), wire.data());
      ef.decode(wire.data(), out.data());
      const std::vector<float> residual = ef.residual().to_host();
      for (size_t p = 0; p < out.size(); ++p) {
        ASSERT_EQ(bits_of(residual[p]), 0u) << k.name << " entry " << p;  // exactly +0
        ASSERT_EQ(out[p], (*k.x)[p]) << k.name;
      }
    }
  }
}

}  // namespace
}  // namespace occ
