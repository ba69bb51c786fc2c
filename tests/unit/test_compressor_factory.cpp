// compress/compressor_factory.h: the one place flags become compressors.
//
// Facts checked:
//   * every method's name parses back to it; unknown names, and known ones a
//     link does not offer, throw UsageError naming the flag and the choices;
//   * make_compressor builds the documented compressor, and compressed_wire_floats
//     (the planner's size) equals the built compressor's wire_floats() for every
//     method over odd and even shapes, so the planner counts the bytes the engine sends;
//   * stateful() is true exactly for PowerSGD and anything under ErrorFeedback;
//   * every method computes on its placement's Ops (on a GPU: the CUDA
//     kernels; tests/cuda compares those with the CPU's) and there sends the
//     same wire and decodes the same values as the default placement, bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "compress/compressed_activations.h"
#include "compress/error_feedback.h"
#include "compress/compressor_factory.h"
#include "compress/powersgd.h"
#include "core/rng.h"
#include "core/error.h"
#include "kernels/timed_ops.h"

namespace occ {
namespace {

TEST(CompressorFactory, NamesRoundTrip) {
  for (CompressionMethod m : all_methods()) EXPECT_EQ(parse_method(method_name(m), "--x", all_methods()), m);
  EXPECT_EQ(all_methods().size(), 15u);
}

TEST(CompressorFactory, BadNamesThrowNamingTheChoices) {
  try {
    parse_method("zstd", "--grad-comp-method", all_methods());
    FAIL() << "no throw";
  } catch (const UsageError& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("--grad-comp-method 'zstd' is not a compression method"), std::string::npos) << w;
    EXPECT_NE(w.find("powersgd|int8|fp8-e4m3|fp8-e5m2|topk|sign|mxfp4|nvfp4|int4|int3|int2|lloydmax2|lloydmax3|adaptive|topk2"), std::string::npos) << w;
  }
  try {
    parse_method("sign", "--activation-comp-method", ActivationCompressionConfig::methods(), "none");
    FAIL() << "no throw";
  } catch (const UsageError& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("'sign' is not offered on this link; use one of none|int8|fp8-e4m3|topk|mxfp4|nvfp4|int4|int3|int2|"
                     "lloydmax2|lloydmax3"),
              std::string::npos)
        << w;
  }
}

TEST(CompressorFactory, PlannerSizesEqualTheBuiltCompressors) {
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1}, {3, 5}, {7, 13}, {64, 64}, {512, 256}, {5, 1000}};
  for (CompressionMethod m : all_methods())
    for (double fraction : {0.01, 0.1, 0.5, 1.0})
      for (int rank : {1, 16, 300})
        for (auto [r, c] : shapes) {
          const CompressorSpec spec{m, rank, fraction, rank == 16, method_is_block(m) && rank == 300 ? 32 : 0};
          auto built = make_compressor(spec, r, c, 1, 2);
          EXPECT_EQ(built->rows(), r);
          EXPECT_EQ(built->cols(), c);
          EXPECT_EQ(compressed_wire_floats(spec, r, c), built->wire_floats()) << describe(spec) << " " << r << "x" << c;
        }
}

TEST(CompressorFactory, StatefulOnlyWithWarmStartOrResidual) {
  for (CompressionMethod m : all_methods()) {
    auto c = make_compressor({m, 4, 0.1}, 8, 8, 1, 2);
    EXPECT_EQ(c->stateful(), m == CompressionMethod::PowerSgd) << method_name(m);
    EXPECT_TRUE(ErrorFeedback(std::move(c)).stateful()) << method_name(m);
  }
}

TEST(CompressorFactory, EveryMethodComputesOnItsPlacementsOps) {
  // A compressor that bypassed its placement would run the CPU's loops on a
  // GPU's pointers: each method must reach the placement's Ops for its
  // encode and decode, and send what the CPU's default placement sends.
  const int64_t r = 24, c = 40;
  std::vector<float> m(size_t(r * c));
  for (size_t i = 0; i < m.size(); ++i) m[i] = normal_at(99, 0, uint64_t(i));
  const std::map<CompressionMethod, std::vector<std::string>> ops_of{
      {CompressionMethod::PowerSgd, {"matmul", "orthonormalize_columns"}},
      {CompressionMethod::Int8, {"encode_scaled_rows", "decode_scaled_rows"}},
      {CompressionMethod::Fp8E4m3, {"encode_scaled_rows", "decode_scaled_rows"}},
      {CompressionMethod::Fp8E5m2, {"encode_scaled_rows", "decode_scaled_rows"}},
      {CompressionMethod::Topk, {"encode_topk", "decode_topk"}},
      {CompressionMethod::Sign, {"encode_signs", "decode_signs"}},
      {CompressionMethod::Mxfp4, {"encode_blocks", "decode_blocks"}},
      {CompressionMethod::Nvfp4, {"encode_blocks", "decode_blocks"}},
      {CompressionMethod::Int4, {"encode_blocks", "decode_blocks"}},
      {CompressionMethod::Int3, {"encode_blocks", "decode_blocks"}},
      {CompressionMethod::Int2, {"encode_blocks", "decode_blocks", "rotate_rows"}},
      {CompressionMethod::LloydMax2, {"encode_blocks", "decode_blocks", "rotate_rows"}},
      {CompressionMethod::LloydMax3, {"encode_blocks", "decode_blocks", "rotate_rows"}},
      {CompressionMethod::Adaptive, {"encode_adaptive", "decode_adaptive", "rotate_rows"}},
      {CompressionMethod::Topk2, {"encode_topk2", "decode_topk2"}}};
  for (CompressionMethod method : all_methods()) {
    // (The 2- and 3-bit table codes rotated: the rotation must run on the placement too.)
    const bool table = method == CompressionMethod::Int2 || method == CompressionMethod::LloydMax2 ||
                       method == CompressionMethod::LloydMax3 || method == CompressionMethod::Adaptive;
    const CompressorSpec spec{method, 4, 0.25, method_takes_block_options(method), table ? 16 : 0};
    kernels::TimedOps placed(kernels::cpu_ops());
    auto plain = make_compressor(spec, r, c, 1, 2);
    auto on_ops = make_compressor(spec, r, c, 1, 2, CompressorPlacement{&placed});
    std::vector<float> wire_a(size_t(plain->wire_floats())), wire_b(wire_a.size(), 7.0f);
    std::vector<float> out_a(m.size()), out_b(m.size(), 7.0f);
    for (int step = 0; step < 2; ++step) {  // twice: PowerSGD's warm start must agree too
      plain->encode(m.data(), wire_a.data());
      on_ops->encode(m.data(), wire_b.data());
      plain->decode(wire_a.data(), out_a.data());
      on_ops->decode(wire_b.data(), out_b.data());
      EXPECT_EQ(std::memcmp(wire_a.data(), wire_b.data(), wire_a.size() * sizeof(float)), 0) << method_name(method);
      EXPECT_EQ(std::memcmp(out_a.data(), out_b.data(), out_a.size() * sizeof(float)), 0) << method_name(method);
    }
    std::set<std::string> called;
    for (const auto& a : placed.accounts()) called.insert(a.name);
    for (const std::string& op : ops_of.at(method))
      EXPECT_TRUE(called.count(op)) << method_name(method) << " never called " << op << " on its placement's Ops";
  }
}

TEST(CompressorFactory, Describe) {
  EXPECT_EQ(describe({CompressionMethod::PowerSgd, 16, 0.1}), "powersgd rank 16");
  EXPECT_EQ(describe({CompressionMethod::Topk, 16, 0.1}), "topk 10%");
  EXPECT_EQ(describe({CompressionMethod::Fp8E5m2, 16, 0.1}), "fp8-e5m2");
}

}  // namespace
}  // namespace occ
