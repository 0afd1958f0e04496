// SwiGLU ([gate | up] rows) vs fp64, forward and backward, the backward also against central
// finite differences of a random projection of the fp64 forward; gates out to +-90 cover
// exp overflow. Runs on every instantiated backend (OnBackend.h), CUDA also vs the CPU twin.
#include <gtest/gtest.h>

#include <cmath>

#include "OnBackend.h"
#include "TestUtil.h"

using namespace ts::kernels;
using namespace ts::kernels::test;

namespace {
double silu(double g) {
  return g / (1.0 + std::exp(-g));
}

void swigluRef(const std::vector<double>& x, int N, int F, std::vector<double>& out) {
  out.assign(size_t(N) * F, 0);
  for (int i = 0; i < N; ++i)
    for (int c = 0; c < F; ++c)
      out[size_t(i) * F + c] = silu(x[size_t(i) * 2 * F + c]) * x[size_t(i) * 2 * F + F + c];
}

void swigluGradRef(const std::vector<double>& x, const std::vector<double>& G, int N, int F,
                   std::vector<double>& dx) {
  dx.assign(x.size(), 0);
  for (int i = 0; i < N; ++i)
    for (int c = 0; c < F; ++c) {
      const double g = x[size_t(i) * 2 * F + c], u = x[size_t(i) * 2 * F + F + c];
      const double s = 1.0 / (1.0 + std::exp(-g)), go = G[size_t(i) * F + c];
      dx[size_t(i) * 2 * F + c] = go * u * (s + g * s * (1 - s));
      dx[size_t(i) * 2 * F + F + c] = go * silu(g);
    }
}

// Random [gate | up] rows; a few gates far out where exp(-g) over- or underflows.
std::vector<float> swigluInput(int N, int F, uint32_t seed) {
  auto x = randomVec(size_t(N) * 2 * F, seed, -4.0f, 4.0f);
  const float far[] = {-90.0f, -30.0f, 30.0f, 90.0f};
  for (int i = 0; i < N; ++i)
    for (int k = 0; k < 4 && k < F; ++k) x[size_t(i) * 2 * F + (i * 7 + k * 13) % F] = far[k];
  return x;
}

struct Shape {
  int N, F;
};
class SwiGlu : public OnBackend {};
}  // namespace

TEST_P(SwiGlu, ForwardMatchesFp64) {
  for (Shape s : {Shape{37, 67}, {1, 1}, {3, 1000}, {300, 129}}) {
    const auto x = swigluInput(s.N, s.F, 1);
    auto run = [&](Backend& b) {
      DeviceBuffers d(b);
      float* out = d.poisoned(size_t(s.N) * s.F);
      b.swigluForward(out, d.up(x), s.N, s.F);
      return d.down(out, size_t(s.N) * s.F);
    };
    const auto out = run(be());
    std::vector<double> want;
    swigluRef(toDouble(x), s.N, s.F, want);
    EXPECT_TRUE(allClose(out, want, 1e-6, 1e-7)) << s.N << "x" << s.F;
    if (hasTwin()) {
      EXPECT_TRUE(allClose(out, run(cpu()), 1e-6, 1e-7)) << "vs cpu " << s.N;
    }
  }
}

TEST_P(SwiGlu, BackwardMatchesFp64AndFiniteDifferences) {
  for (Shape s : {Shape{37, 67}, {1, 1}, {3, 1000}, {300, 129}}) {
    const auto x = swigluInput(s.N, s.F, 2);
    const auto G = randomVec(size_t(s.N) * s.F, 3);
    auto run = [&](Backend& b) {
      DeviceBuffers d(b);
      float* dx = d.poisoned(x.size());
      b.swigluBackward(dx, d.up(x), d.up(G), s.N, s.F);
      return d.down(dx, x.size());
    };
    const auto dx = run(be());
    const auto xd = toDouble(x), Gd = toDouble(G);
    std::vector<double> want;
    swigluGradRef(xd, Gd, s.N, s.F, want);
    EXPECT_TRUE(allClose(dx, want, 1e-5, 2e-6)) << s.N << "x" << s.F;  // silu' cancels near -1.28
    if (s.N * s.F <= 37 * 67) {
      std::vector<double> o;
      const auto fd = finiteDiff(xd, [&](const std::vector<double>& v) {
        swigluRef(v, s.N, s.F, o);
        return dot(o, Gd);
      });
      EXPECT_TRUE(allClose(dx, fd, 1e-5, 2e-6)) << "fd " << s.N << "x" << s.F;
    }
    if (hasTwin()) {
      EXPECT_TRUE(allClose(dx, run(cpu()), 1e-5, 2e-6)) << "vs cpu " << s.N;
    }
  }
}

TS_ON_BACKEND(SwiGlu);
