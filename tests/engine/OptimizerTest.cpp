// AdamW / SGD against fp64 reference updates written from the PyTorch docs, and clipping.
#include <gtest/gtest.h>

#include <cmath>

#include "trainscope/engine/Gpt.h"
#include "trainscope/engine/Optimizer.h"

using namespace ts::engine;

namespace {
GptConfig tiny() {
  GptConfig c;
  c.layers = 1;
  c.heads = 2;
  c.d_model = 8;
  c.seq_len = 4;
  c.vocab = 9;
  return c;
}
void fillGrads(Gpt& m, int k) {
  float* g = m.gradBuffer().f32();
  for (int64_t i = 0; i < m.numParams(); ++i) g[i] = std::sin(0.37f * i + k) * 0.1f;
}
}  // namespace

TEST(Optimizer, AdamWMatchesReferenceAndSkipsDecayOnBiasesAndNorms) {
  auto backend = ts::kernels::makeCpuBackend();
  MemoryTracker tracker;
  Gpt m(tiny(), backend.get(), &tracker);
  m.initWeights(5);
  ts::core::OptimizerConfig oc;
  oc.type = "adamw";
  oc.betas = {0.8, 0.95};
  oc.eps = 1e-6;
  oc.weight_decay = 0.5;
  auto opt = makeOptimizer(oc, m.arena(), backend.get(), &tracker);
  const int64_t P = m.numParams();
  std::vector<double> p(m.paramBuffer().f32(), m.paramBuffer().f32() + P), mm(P, 0), vv(P, 0);
  std::vector<bool> decay(P);
  for (const auto& info : m.params())
    for (int64_t i = 0; i < info.numel; ++i) decay[info.offset + i] = info.decay;
  const double lr = 0.01;
  for (int t = 1; t <= 3; ++t) {
    fillGrads(m, t);
    const float* g = m.gradBuffer().f32();
    for (int64_t i = 0; i < P; ++i) {
      if (decay[i]) p[i] -= lr * 0.5 * p[i];
      mm[i] = 0.8 * mm[i] + 0.2 * g[i];
      vv[i] = 0.95 * vv[i] + 0.05 * double(g[i]) * g[i];
      const double mh = mm[i] / (1 - std::pow(0.8, t)), vh = vv[i] / (1 - std::pow(0.95, t));
      p[i] -= lr * mh / (std::sqrt(vh) + 1e-6);
    }
    opt->step(float(lr));
  }
  EXPECT_EQ(opt->stepCount(), 3);
  const float* q = m.paramBuffer().f32();
  for (int64_t i = 0; i < P; ++i) ASSERT_NEAR(q[i], p[i], 2e-6 + 1e-5 * std::abs(p[i])) << i;
  // A LayerNorm weight starts at 1: with decay it would have shrunk by lr*wd per step.
  EXPECT_FALSE(m.find("h.0.ln_1.weight")->decay);
  EXPECT_TRUE(m.find("h.0.mlp.c_fc.weight")->decay);
}

TEST(Optimizer, SgdMomentumMatchesReference) {
  auto backend = ts::kernels::makeCpuBackend();
  MemoryTracker tracker;
  Gpt m(tiny(), backend.get(), &tracker);
  m.initWeights(6);
  ts::core::OptimizerConfig oc;
  oc.type = "sgd";
  oc.momentum = 0.9;
  oc.weight_decay = 0.0;
  auto opt = makeOptimizer(oc, m.arena(), backend.get(), &tracker);
  const int64_t P = m.numParams();
  std::vector<double> p(m.paramBuffer().f32(), m.paramBuffer().f32() + P), buf(P, 0);
  for (int t = 1; t <= 3; ++t) {
    fillGrads(m, t);
    const float* g = m.gradBuffer().f32();
    for (int64_t i = 0; i < P; ++i) {
      buf[i] = t == 1 ? g[i] : 0.9 * buf[i] + g[i];
      p[i] -= 0.1 * buf[i];
    }
    opt->step(0.1f);
  }
  const float* q = m.paramBuffer().f32();
  for (int64_t i = 0; i < P; ++i) ASSERT_NEAR(q[i], p[i], 1e-6 + 1e-5 * std::abs(p[i])) << i;
}

TEST(Optimizer, GlobalNormClipping) {
  auto backend = ts::kernels::makeCpuBackend();
  MemoryTracker tracker;
  Gpt m(tiny(), backend.get(), &tracker);
  fillGrads(m, 1);
  double ss = 0;
  for (int64_t i = 0; i < m.numParams(); ++i)
    ss += double(m.gradBuffer().f32()[i]) * m.gradBuffer().f32()[i];
  const double norm = std::sqrt(ss);
  EXPECT_NEAR(clipGradNorm(m.arena(), backend.get(), 0.0), norm, 1e-6 * norm);  // 0 = off
  EXPECT_NEAR(clipGradNorm(m.arena(), backend.get(), norm * 2), norm,
              1e-6 * norm);  // below: unchanged
  EXPECT_NEAR(clipGradNorm(m.arena(), backend.get(), norm / 4), norm,
              1e-6 * norm);  // returns pre-clip
  EXPECT_NEAR(clipGradNorm(m.arena(), backend.get(), 0.0), norm / 4, 1e-5 * norm);
}
