// AdamW and SGD-momentum vs fp64 implementations of PyTorch's formulas over several steps.
#include <gtest/gtest.h>

#include <cmath>

#include "TestUtil.h"
#include "trainscope/kernels/Backend.h"

using namespace ts::kernels;
using namespace ts::kernels::test;

TEST(AdamW, MatchesPyTorchFormulaOverSteps) {
  auto be = makeCpuBackend();
  const int64_t n = 100003;  // threaded path
  const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  auto p = randomVec(n, 1);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  auto rp = toDouble(p);
  std::vector<double> rm(n, 0.0), rv(n, 0.0);
  for (int64_t step = 1; step <= 6; ++step) {
    const auto g = randomVec(n, uint32_t(100 + step), -2.0f, 2.0f);
    be->adamwUpdate(p.data(), g.data(), m.data(), v.data(), n, lr, b1, b2, eps, wd, step);
    // torch.optim.AdamW (single tensor): decoupled decay, then bias-corrected Adam step.
    const double bc1 = 1 - std::pow(double(b1), double(step));
    const double bc2 = 1 - std::pow(double(b2), double(step));
    for (int64_t i = 0; i < n; ++i) {
      rp[i] *= 1 - double(lr) * wd;
      rm[i] = b1 * rm[i] + (1 - double(b1)) * g[i];
      rv[i] = b2 * rv[i] + (1 - double(b2)) * double(g[i]) * g[i];
      const double denom = std::sqrt(rv[i]) / std::sqrt(bc2) + eps;
      rp[i] -= lr / bc1 * rm[i] / denom;
    }
  }
  EXPECT_TRUE(allClose(p, rp, 1e-5, 1e-6));
  EXPECT_TRUE(allClose(m, rm, 1e-5, 1e-7));
  EXPECT_TRUE(allClose(v, rv, 1e-5, 1e-8));
}

TEST(AdamW, FirstStepMovesByLrTimesSign) {
  // With bias correction the first update is lr * g / (|g| + eps): a published Adam property.
  auto be = makeCpuBackend();
  std::vector<float> p = {1.0f, -2.0f, 0.5f}, g = {0.3f, -5.0f, 1e-3f}, m(3, 0), v(3, 0);
  be->adamwUpdate(p.data(), g.data(), m.data(), v.data(), 3, 0.01f, 0.9f, 0.999f, 1e-12f, 0.0f, 1);
  EXPECT_NEAR(p[0], 0.99, 1e-6);
  EXPECT_NEAR(p[1], -1.99, 1e-6);
  EXPECT_NEAR(p[2], 0.49, 1e-6);
}

TEST(Sgd, MomentumMatchesPyTorchFormula) {
  auto be = makeCpuBackend();
  const int64_t n = 1237;
  const float lr = 0.05f, mu = 0.9f, wd = 0.01f;
  auto p = randomVec(n, 2);
  std::vector<float> buf(n, 0.0f);
  auto rp = toDouble(p);
  std::vector<double> rb(n, 0.0);
  for (int step = 0; step < 5; ++step) {
    const auto g = randomVec(n, uint32_t(200 + step));
    be->sgdUpdate(p.data(), g.data(), buf.data(), n, lr, mu, wd);
    for (int64_t i = 0; i < n; ++i) {
      const double gi = g[i] + double(wd) * rp[i];
      rb[i] = step == 0 ? gi : mu * rb[i] + gi;  // torch: buf = clone(g) on the first step
      rp[i] -= lr * rb[i];
    }
  }
  EXPECT_TRUE(allClose(p, rp, 1e-5, 1e-6));
  EXPECT_TRUE(allClose(buf, rb, 1e-5, 1e-6));
}
