// Fused softmax cross-entropy vs fp64, with ignored targets and aliasing dlogits == logits.
#include <gtest/gtest.h>

#include <cmath>

#include "TestUtil.h"
#include "trainscope/kernels/Backend.h"

using namespace ts::kernels;
using namespace ts::kernels::test;

namespace {
void ceRef(const std::vector<float>& x, const std::vector<int32_t>& t, int N, int V, double dl,
           std::vector<double>& loss, std::vector<double>& grad) {
  loss.assign(N, 0.0);
  grad.assign(size_t(N) * V, 0.0);
  for (int i = 0; i < N; ++i) {
    if (t[i] < 0) continue;
    double mx = -1e300, sum = 0;
    for (int j = 0; j < V; ++j) mx = std::max(mx, double(x[size_t(i) * V + j]));
    for (int j = 0; j < V; ++j) sum += std::exp(x[size_t(i) * V + j] - mx);
    loss[i] = std::log(sum) + mx - x[size_t(i) * V + t[i]];
    for (int j = 0; j < V; ++j)
      grad[size_t(i) * V + j] =
          (std::exp(x[size_t(i) * V + j] - mx) / sum - (j == t[i] ? 1.0 : 0.0)) * dl;
  }
}
}  // namespace

TEST(CrossEntropy, MatchesFp64WithIgnoredTargets) {
  auto be = makeCpuBackend();
  for (auto [N, V] : {std::pair{7, 13}, {37, 61}, {1, 2}, {61, 50257}}) {
    const auto x = randomVec(size_t(N) * V, 1, -6.0f, 6.0f);
    std::vector<int32_t> t(N);
    int counted = 0;
    for (int i = 0; i < N; ++i) {
      t[i] = (i % 5 == 3) ? -1 : (i * 7919) % V;  // every fifth row ignored
      counted += t[i] >= 0;
    }
    const float dl = 1.0f / counted;
    auto loss = nanVec(N), grad = nanVec(x.size());
    be->crossEntropyForwardBackward(loss.data(), grad.data(), x.data(), t.data(), N, V, dl);
    std::vector<double> wl, wg;
    ceRef(x, t, N, V, dl, wl, wg);
    EXPECT_TRUE(allClose(loss, wl, 1e-5, 1e-5)) << N << "x" << V;
    EXPECT_TRUE(allClose(grad, wg, 1e-4, 1e-8)) << N << "x" << V;
  }
}

TEST(CrossEntropy, UniformLogitsGiveLogV) {
  auto be = makeCpuBackend();
  const int V = 37;
  std::vector<float> x(V, 0.25f), g(V);
  const int32_t t = 5;
  float loss;
  be->crossEntropyForwardBackward(&loss, g.data(), x.data(), &t, 1, V, 1.0f);
  EXPECT_NEAR(loss, std::log(37.0), 1e-6);
  EXPECT_NEAR(g[5], 1.0 / 37 - 1.0, 1e-6);
  EXPECT_NEAR(g[0], 1.0 / 37, 1e-7);
}

TEST(CrossEntropy, GradientMayAliasLogits) {
  auto be = makeCpuBackend();
  const int N = 13, V = 61;
  auto x = randomVec(size_t(N) * V, 2, -4.0f, 4.0f);
  std::vector<int32_t> t(N);
  for (int i = 0; i < N; ++i) t[i] = i == 4 ? -100 : (i * 31) % V;
  std::vector<double> wl, wg;
  ceRef(x, t, N, V, 0.5, wl, wg);
  std::vector<float> loss(N);
  be->crossEntropyForwardBackward(loss.data(), x.data(), x.data(), t.data(), N, V, 0.5f);
  EXPECT_TRUE(allClose(loss, wl, 1e-5, 1e-5));
  EXPECT_TRUE(allClose(x, wg, 1e-4, 1e-8));
}

TEST(CrossEntropy, GradientMatchesFiniteDifferences) {
  auto be = makeCpuBackend();
  const int N = 3, V = 17;
  const auto x = randomVec(size_t(N) * V, 3, -3.0f, 3.0f);
  const std::vector<int32_t> t = {4, -1, 16};
  std::vector<float> loss(N), g(x.size());
  be->crossEntropyForwardBackward(loss.data(), g.data(), x.data(), t.data(), N, V, 1.0f);
  const auto want = finiteDiff(toDouble(x), [&](const std::vector<double>& v) {
    double total = 0;
    for (int i = 0; i < N; ++i) {
      if (t[i] < 0) continue;
      double sum = 0;
      for (int j = 0; j < V; ++j) sum += std::exp(v[size_t(i) * V + j]);
      total += std::log(sum) - v[size_t(i) * V + t[i]];
    }
    return total;
  });
  EXPECT_TRUE(allClose(g, want, 1e-4, 1e-6));
}

TEST(CrossEntropy, TargetOutOfRangeIsNaNNotACrash) {
  auto be = makeCpuBackend();
  std::vector<float> x = randomVec(7, 4), g(7);
  const int32_t t = 7;
  float loss = 0;
  be->crossEntropyForwardBackward(&loss, g.data(), x.data(), &t, 1, 7, 1.0f);
  EXPECT_TRUE(std::isnan(loss));
}
