// GELU (tanh approximation) and ReLU vs fp64; GELU backward vs finite differences.
#include <gtest/gtest.h>

#include <cmath>

#include "TestUtil.h"
#include "trainscope/kernels/Backend.h"

using namespace ts::kernels;
using namespace ts::kernels::test;

namespace {
double geluRef(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
}  // namespace

TEST(Gelu, ForwardMatchesTanhApproximation) {
  auto be = makeCpuBackend();
  for (int64_t n : {1, 7, 61, 100003}) {  // 100003 takes the threaded path
    const auto x = randomVec(n, 1, -8.0f, 8.0f);
    auto out = nanVec(n);
    be->geluForward(out.data(), x.data(), n);
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = geluRef(x[i]);
    EXPECT_TRUE(allClose(out, want, 1e-5, 2e-7)) << n;
  }
  // Published values of GPT-2's GELU: gelu(1) = 0.841192, gelu(-1) = -0.158808.
  const float x[2] = {1.0f, -1.0f};
  float y[2];
  be->geluForward(y, x, 2);
  EXPECT_NEAR(y[0], 0.841192, 2e-6);
  EXPECT_NEAR(y[1], -0.158808, 2e-6);
}

TEST(Gelu, SaturatesWithoutNaN) {
  auto be = makeCpuBackend();
  const float x[4] = {-100.0f, 100.0f, -1e30f, 1e30f};
  float y[4], d[4];
  const float g[4] = {1, 1, 1, 1};
  be->geluForward(y, x, 4);
  be->geluBackward(d, x, g, 4);
  EXPECT_NEAR(y[0], 0.0f, 1e-30);
  EXPECT_FLOAT_EQ(y[1], 100.0f);
  EXPECT_NEAR(d[0], 0.0f, 1e-30);
  EXPECT_FLOAT_EQ(d[1], 1.0f);
  EXPECT_NEAR(d[2], 0.0f, 1e-30);
  EXPECT_FLOAT_EQ(d[3], 1.0f);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(std::isfinite(y[i]) && std::isfinite(d[i])) << i;
}

TEST(Gelu, BackwardMatchesFiniteDifferences) {
  auto be = makeCpuBackend();
  const int64_t n = 613;
  const auto x = randomVec(n, 2, -5.0f, 5.0f);
  const auto g = randomVec(n, 3);
  auto dx = nanVec(n);
  be->geluBackward(dx.data(), x.data(), g.data(), n);
  std::vector<double> want(n);
  const double h = 1e-6;
  for (int64_t i = 0; i < n; ++i)
    want[i] = g[i] * (geluRef(x[i] + h) - geluRef(x[i] - h)) / (2 * h);
  EXPECT_TRUE(allClose(dx, want, 1e-4, 1e-6));
}

TEST(Relu, ForwardAndBackward) {
  auto be = makeCpuBackend();
  const int64_t n = 100003;
  const auto x = randomVec(n, 4), g = randomVec(n, 5);
  auto y = nanVec(n), dx = nanVec(n);
  be->reluForward(y.data(), x.data(), n);
  be->reluBackward(dx.data(), y.data(), g.data(), n);
  std::vector<double> wy(n), wd(n);
  for (int64_t i = 0; i < n; ++i) {
    wy[i] = x[i] > 0 ? x[i] : 0.0;
    wd[i] = x[i] > 0 ? g[i] : 0.0;
  }
  EXPECT_TRUE(allClose(y, wy, 0, 0));
  EXPECT_TRUE(allClose(dx, wd, 0, 0));
}
