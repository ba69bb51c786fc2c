// ErrorFeedback's decay (LEP with a decay, --inter-grad-comp-lep-decay) and its shared
// scratch (DiLoCo's outer gradients), against a reference written from the definition:
//   corrected = m + decay * e ;  e' = corrected - decode(encode(corrected))
//   * decay 0.5 over three messages: every wire and residual equals the reference's,
//     computed with an unwrapped twin of the same codec (bit for bit);
//   * decay 1 is plain error feedback (the same wires as the default constructor's);
//   * two wrappers sharing one scratch give what each gives with its own;
//   * a decay outside (0, 1] is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "compress/compressor_factory.h"
#include "compress/error_feedback.h"
#include "core/error.h"

#include "compressor_test_util.h"

namespace occ {
namespace {

using test::gaussian;

float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

CompressorSpec lloydmax2() {
  CompressorSpec s;
  s.method = CompressionMethod::LloydMax2;
  return s;
}

TEST(ErrorFeedbackDecay, MatchesTheDefinitionBitForBit) {
  const int64_t n = 12, c = 96;
  const float decay = 0.5f;
  ErrorFeedback ef(make_compressor(lloydmax2(), n, c, 3, 4), kernels::cpu_ops(), decay);
  auto twin = make_compressor(lloydmax2(), n, c, 3, 4);
  std::vector<float> e(size_t(n * c), 0.0f), corrected(e.size()), decoded(e.size());
  std::vector<float> wire(size_t(ef.wire_floats())), twin_wire(wire.size());
  for (int k = 0; k < 3; ++k) {
    const auto m = gaussian(size_t(n * c), uint32_t(40 + k));
    for (size_t i = 0; i < e.size(); ++i) corrected[i] = m[i] + decay * e[i];
    twin->encode(corrected.data(), twin_wire.data());
    twin->decode(twin_wire.data(), decoded.data());
    for (size_t i = 0; i < e.size(); ++i) e[i] = corrected[i] - decoded[i];
    ef.encode(m.data(), wire.data());
    ASSERT_EQ(0, std::memcmp(wire.data(), twin_wire.data(), wire.size() * sizeof(float))) << "message " << k;
    const std::vector<float> residual = ef.residual().to_host();
    ASSERT_EQ(0, std::memcmp(residual.data(), e.data(), e.size() * sizeof(float))) << "message " << k;
  }
  // Not vacuous: the residual is not zero, and a decay of 1 would have sent another third wire.
  EXPECT_GT(max_abs(e), 0.05f);
  ErrorFeedback plain(make_compressor(lloydmax2(), n, c, 3, 4));
  std::vector<float> plain_wire(wire.size());
  for (int k = 0; k < 3; ++k) {
    const auto m = gaussian(size_t(n * c), uint32_t(40 + k));
    plain.encode(m.data(), plain_wire.data());
  }
  EXPECT_NE(0, std::memcmp(wire.data(), plain_wire.data(), wire.size() * sizeof(float)));
  EXPECT_EQ(plain.decay(), 1.0f);
}

TEST(ErrorFeedbackDecay, SharedScratchGivesWhatOwnBuffersGive) {
  ErrorFeedbackScratch shared;
  const int64_t rows[] = {8, 20}, cols[] = {64, 40};
  std::vector<std::unique_ptr<ErrorFeedback>> a, b;
  for (int i = 0; i < 2; ++i) {
    a.push_back(std::make_unique<ErrorFeedback>(make_compressor(lloydmax2(), rows[i], cols[i], 1, uint64_t(i)),
                                                kernels::cpu_ops(), 1.0f, &shared));
    b.push_back(std::make_unique<ErrorFeedback>(make_compressor(lloydmax2(), rows[i], cols[i], 1, uint64_t(i))));
  }
  for (int k = 0; k < 3; ++k)
    for (int i = 0; i < 2; ++i) {
      const auto m = gaussian(size_t(rows[i] * cols[i]), uint32_t(10 * k + i));
      std::vector<float> wa(size_t(a[size_t(i)]->wire_floats())), wb(wa.size());
      a[size_t(i)]->encode(m.data(), wa.data());
      b[size_t(i)]->encode(m.data(), wb.data());
      ASSERT_EQ(0, std::memcmp(wa.data(), wb.data(), wa.size() * sizeof(float))) << "span " << i << " message " << k;
      ASSERT_EQ(a[size_t(i)]->residual().to_host(), b[size_t(i)]->residual().to_host());
    }
}

TEST(ErrorFeedbackDecay, RefusesADecayOutsideZeroToOne) {
  for (float bad : {0.0f, -0.5f, 1.5f})
    EXPECT_THROW(ErrorFeedback(make_compressor(lloydmax2(), 4, 64, 1, 1), kernels::cpu_ops(), bad), Error) << bad;
}

}  // namespace
}  // namespace occ
