// DiLoCo's pure parts (train/diloco.h): the round schedule, which fragment a
// tensor belongs to, and the outer step against torch.optim.SGD(nesterov=True)'s
// formula written out independently.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "train/diloco.h"

using namespace occ;

namespace {
DilocoSchedule schedule(int H, int F, int tau) {
  DilocoConfig c;
  c.inner_steps = H, c.fragments = F, c.overlap_steps = tau;
  return DilocoSchedule(c);
}
}  // namespace

TEST(DilocoSchedule, OneFragmentSyncsEveryHSteps) {
  const DilocoSchedule s = schedule(8, 1, 0);
  EXPECT_EQ(s.offset(0), 8);
  for (int64_t t = 1; t <= 40; ++t) EXPECT_EQ(s.starts_after(t, 0), t % 8 == 0) << t;
  EXPECT_EQ(s.last_start(7, 0), -1);
  EXPECT_EQ(s.last_start(23, 0), 16);
  EXPECT_EQ(s.in_flight_after(16, 0), -1);  // no overlap: lands where it starts
}

TEST(DilocoSchedule, FragmentsStaggerOverTheRound) {
  // H 8, F 3: offsets (f + 1) 8 / 3 = 2, 5, 8; each fragment every 8 steps after its offset.
  const DilocoSchedule s = schedule(8, 3, 2);
  EXPECT_EQ(s.offset(0), 2);
  EXPECT_EQ(s.offset(1), 5);
  EXPECT_EQ(s.offset(2), 8);
  std::vector<int> starts(3, 0);
  for (int64_t t = 1; t <= 32; ++t)
    for (int f = 0; f < 3; ++f) starts[size_t(f)] += s.starts_after(t, f) ? 1 : 0;
  EXPECT_EQ(starts, (std::vector<int>{4, 4, 4}));  // 32 steps = 4 rounds: every fragment 4 times
  // tau 2: fragment 0's sync after step 10 is in flight after steps 10 and 11, lands after 12.
  EXPECT_EQ(s.in_flight_after(9, 0), -1);
  EXPECT_EQ(s.in_flight_after(10, 0), 10);
  EXPECT_EQ(s.in_flight_after(11, 0), 10);
  EXPECT_EQ(s.in_flight_after(12, 0), -1);
  EXPECT_EQ(s.in_flight_after(1, 0), -1);  // before its first sync
}

TEST(DilocoFragments, StridedLayersEmbeddingsWithLayerZeroFinalNormWithTheLastLayer) {
  EXPECT_EQ(diloco_fragment_of("layers.0.input_layernorm.weight", 6, 3), 0);
  EXPECT_EQ(diloco_fragment_of("layers.4.mlp.dense_h_to_4h.weight", 6, 3), 1);
  EXPECT_EQ(diloco_fragment_of("layers.5.attention.dense.bias", 6, 3), 2);
  EXPECT_EQ(diloco_fragment_of("layers.11.attention.dense.bias", 12, 3), 2);
  EXPECT_EQ(diloco_fragment_of("embedding.word_embeddings.weight", 6, 3), 0);
  EXPECT_EQ(diloco_fragment_of("embedding.position_embeddings.weight", 6, 3), 0);
  // Both copies of the tied word embedding sync together.
  EXPECT_EQ(diloco_fragment_of("lm_head.word_embeddings.weight", 6, 3), 0);
  EXPECT_EQ(diloco_fragment_of("final_layernorm.weight", 6, 4), 1);  // with layer 5: 5 mod 4
  EXPECT_EQ(diloco_fragment_of("final_layernorm.bias", 6, 1), 0);
  // An untied output layer (--untie-embeddings-and-output-weights) goes with the final norm.
  EXPECT_EQ(diloco_fragment_of("output_layer.weight", 6, 4), 1);
  EXPECT_EQ(diloco_fragment_of("output_layer.weight", 6, 3), 2);
  EXPECT_THROW(diloco_fragment_of("something.else", 6, 3), Error);
}

TEST(DilocoOuterStep, LrOneMomentumZeroIsTheMeanBitForBit) {
  // theta - (theta - mean) is not `mean` in floats in general; the outer step is, exactly.
  std::mt19937 rng(7);
  std::normal_distribution<float> n(0.0f, 0.02f);
  const int64_t N = 4096;
  std::vector<float> outer(N), mean(N), delta(N), v(N, 0.0f);
  int inexact = 0;
  for (int64_t i = 0; i < N; ++i) {
    outer[size_t(i)] = n(rng);
    mean[size_t(i)] = i % 7 == 0 ? -outer[size_t(i)] * 1e-6f : outer[size_t(i)] + 1e-3f * n(rng);  // signs cross too
    delta[size_t(i)] = outer[size_t(i)] - mean[size_t(i)];
    inexact += outer[size_t(i)] - delta[size_t(i)] != mean[size_t(i)] ? 1 : 0;
  }
  ASSERT_GT(inexact, 0) << "the test needs elements where theta - Delta != mean in floats";
  std::vector<float> o = outer;
  diloco_outer_step(o.data(), v.data(), mean.data(), delta.data(), N, 1.0f, 0.0f);
  EXPECT_EQ(std::memcmp(o.data(), mean.data(), size_t(N) * sizeof(float)), 0);
  for (int64_t i = 0; i < N; ++i) EXPECT_EQ(v[size_t(i)], delta[size_t(i)]);  // v = 0 * v + Delta
}

TEST(DilocoOuterStep, NesterovAsTorchSgd) {
  // torch.optim.SGD(lr, momentum=mu, nesterov=True, dampening=0) on gradient Delta:
  //   buf = mu buf + Delta (buf = Delta at the first step); p -= lr (Delta + mu buf).
  const float lr = 0.7f, mu = 0.9f;
  std::mt19937 rng(3);
  std::normal_distribution<double> n(0.0, 1.0);
  const int64_t N = 64;
  std::vector<float> outer(N), v(N, 0.0f);
  std::vector<double> ref_p(N), ref_buf(N, 0.0);
  for (int64_t i = 0; i < N; ++i) ref_p[size_t(i)] = outer[size_t(i)] = float(0.02 * n(rng));
  for (int step = 0; step < 5; ++step) {
    std::vector<float> mean(N), delta(N);
    for (int64_t i = 0; i < N; ++i) {
      mean[size_t(i)] = float(outer[size_t(i)] + 1e-3 * n(rng));
      delta[size_t(i)] = outer[size_t(i)] - mean[size_t(i)];
      const double d = delta[size_t(i)];
      ref_buf[size_t(i)] = step == 0 ? d : mu * ref_buf[size_t(i)] + d;
      ref_p[size_t(i)] = double(outer[size_t(i)]) - lr * (d + mu * ref_buf[size_t(i)]);
    }
    diloco_outer_step(outer.data(), v.data(), mean.data(), delta.data(), N, lr, mu);
    for (int64_t i = 0; i < N; ++i) {
      EXPECT_NEAR(v[size_t(i)], ref_buf[size_t(i)], 1e-9) << "step " << step;
      EXPECT_NEAR(outer[size_t(i)], ref_p[size_t(i)], 1e-8) << "step " << step;
      ref_p[size_t(i)] = outer[size_t(i)];  // the next step starts from the engine's floats
      ref_buf[size_t(i)] = v[size_t(i)];
    }
  }
}

TEST(DilocoConfig, RefusesWhatItCannotDoInOneLine) {
  DilocoConfig c;
  c.inner_steps = 8;
  EXPECT_NO_THROW(c.validate(6, false, false, false));
  auto refused = [&](DilocoConfig d, bool grad_comp, bool fe, bool zero, const char* words) {
    try {
      d.validate(6, grad_comp, fe, zero);
      ADD_FAILURE() << "accepted: " << words;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  };
  refused(c, true, false, false, "--grad-comp");
  refused(c, false, true, false, "--emb-comm-opt");
  refused(c, false, false, true, "--use-distributed-optimizer");
  DilocoConfig d = c;
  d.fragments = 7;
  refused(d, false, false, false, "--diloco-fragments 7");
  d = c, d.fragments = 3, d.inner_steps = 2;
  refused(d, false, false, false, "exceeds --diloco-inner-steps");
  d = c, d.overlap_steps = 8;
  refused(d, false, false, false, "--diloco-overlap-steps");
  d = c, d.outer_momentum = 1.0f;
  refused(d, false, false, false, "--diloco-outer-momentum");
  d = c, d.mixing = 1.5f;
  refused(d, false, false, false, "--diloco-mixing");
}
