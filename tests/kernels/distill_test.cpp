// The distillation loss op (OpList.h) on every instantiated backend (OnBackend.h): both terms
// against an fp64 reference, the gradient against central differences of the fp64 objective
// alpha T^2 KL + (1 - alpha) CE, ignored rows, dlogits written in place over poisoned memory;
// CUDA also against its CPU twin.
#include <gtest/gtest.h>

#include <cmath>

#include "OnBackend.h"
#include "TestUtil.h"

using namespace ts::kernels;
using namespace ts::kernels::test;

namespace {
class Distill : public OnBackend {};

// fp64: (1 - alpha) CE + alpha T^2 KL of one row, and the two terms.
double objective(const std::vector<double>& x, const std::vector<double>& z, int t, double T,
                 double alpha, double* ce = nullptr, double* kl = nullptr) {
  const size_t V = x.size();
  double mx = -1e300, mz = -1e300;
  for (size_t j = 0; j < V; ++j) {
    mx = std::max(mx, x[j]);
    mz = std::max(mz, z[j]);
  }
  double sh = 0, sq = 0, sp = 0;
  for (size_t j = 0; j < V; ++j) {
    sh += std::exp(x[j] - mx);
    sq += std::exp((x[j] - mx) / T);
    sp += std::exp((z[j] - mz) / T);
  }
  const double c = std::log(sh) + mx - x[size_t(t)];
  double k = 0;
  for (size_t j = 0; j < V; ++j) {
    const double lp = (z[j] - mz) / T - std::log(sp), lq = (x[j] - mx) / T - std::log(sq);
    k += std::exp(lp) * (lp - lq);
  }
  if (ce) *ce = c;
  if (kl) *kl = k;
  return (1 - alpha) * c + alpha * T * T * k;
}
}  // namespace

TEST_P(Distill, TermsAndGradientMatchFp64AndFiniteDifferences) {
  const int N = 6, V = 37;
  const float T = 2.5f, alpha = 0.7f, dloss = 1.f / 5;
  auto x = randomVec(size_t(N) * V, 3, -4.f, 4.f);
  auto z = randomVec(size_t(N) * V, 4, -6.f, 6.f);
  std::vector<int32_t> tg = {3, -1, 36, 0, 17, 5};
  auto run = [&](Backend& b) {
    DeviceBuffers d(b);
    float* ce = d.poisoned(N);
    float* kl = d.poisoned(N);
    float* lg = d.up(x);  // dlogits in place
    b.distillForwardBackward(ce, kl, lg, lg, d.up(z), d.up(tg), N, V, T, alpha, dloss);
    return std::tuple{d.down(ce, N), d.down(kl, N), d.down(lg, size_t(N) * V)};
  };
  const auto [ce, kl, dx] = run(be());
  for (int i = 0; i < N; ++i) {
    std::vector<double> xr(x.begin() + i * V, x.begin() + (i + 1) * V);
    std::vector<double> zr(z.begin() + i * V, z.begin() + (i + 1) * V);
    if (tg[size_t(i)] < 0) {
      EXPECT_EQ(ce[size_t(i)], 0.f);
      EXPECT_EQ(kl[size_t(i)], 0.f);
      for (int j = 0; j < V; ++j) EXPECT_EQ(dx[size_t(i * V + j)], 0.f);
      continue;
    }
    double c = 0, k = 0;
    objective(xr, zr, tg[size_t(i)], T, alpha, &c, &k);
    EXPECT_NEAR(ce[size_t(i)], c, 1e-5 * std::max(1.0, c)) << i;
    EXPECT_NEAR(kl[size_t(i)], k, 1e-5 * std::max(1.0, k)) << i;
    EXPECT_GT(k, 0.0);
    for (int j = 0; j < V; ++j) {
      const double h = 1e-4;
      auto xp = xr, xm = xr;
      xp[size_t(j)] += h;
      xm[size_t(j)] -= h;
      const double fd = dloss *
                        (objective(xp, zr, tg[size_t(i)], T, alpha) -
                         objective(xm, zr, tg[size_t(i)], T, alpha)) /
                        (2 * h);
      EXPECT_NEAR(dx[size_t(i * V + j)], fd, 2e-6) << i << "," << j;
    }
  }
  if (hasTwin()) {
    const auto [c2, k2, d2] = run(cpu());
    for (int i = 0; i < N; ++i) {
      EXPECT_NEAR(ce[size_t(i)], c2[size_t(i)], 1e-5);
      EXPECT_NEAR(kl[size_t(i)], k2[size_t(i)], 1e-5);
    }
    for (size_t j = 0; j < dx.size(); ++j) EXPECT_NEAR(dx[j], d2[j], 1e-6);
  }
}

// alpha 0 is plain cross-entropy: the same losses and gradient as the CE op.
TEST_P(Distill, AlphaZeroIsCrossEntropy) {
  const int N = 4, V = 19;
  auto x = randomVec(size_t(N) * V, 5, -3.f, 3.f);
  auto z = randomVec(size_t(N) * V, 6, -3.f, 3.f);
  std::vector<int32_t> tg = {1, 18, -1, 7};
  DeviceBuffers d(be());
  float* ce = d.poisoned(N);
  float* kl = d.poisoned(N);
  float* lg = d.up(x);
  be().distillForwardBackward(ce, kl, lg, lg, d.up(z), d.up(tg), N, V, 2.f, 0.f, 0.5f);
  float* l2 = d.poisoned(N);
  float* g2 = d.up(x);
  be().crossEntropyForwardBackward(l2, g2, g2, d.up(tg), N, V, 0.5f);
  const auto a = d.down(ce, N), b = d.down(l2, N);
  const auto ga = d.down(lg, size_t(N) * V), gb = d.down(g2, size_t(N) * V);
  for (int i = 0; i < N; ++i) EXPECT_NEAR(a[size_t(i)], b[size_t(i)], 1e-5);
  for (size_t j = 0; j < ga.size(); ++j) EXPECT_NEAR(ga[j], gb[j], 1e-6);
}

TS_ON_BACKEND(Distill);
