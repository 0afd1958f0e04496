// GeGLU on rows [gate | up] vs fp64 gelu_pytorch_tanh: forward, backward against the analytic
// fp64 derivative and central differences, gates out to +-12 (the saturated tails) included;
// the gate half equals geluForward times up. Outputs start as NaN bytes. Runs on every
// instantiated backend (OnBackend.h), CUDA also against the CPU twin.
#include <gtest/gtest.h>

#include <cmath>

#include "OnBackend.h"
#include "TestUtil.h"

using namespace ts::kernels;
using namespace ts::kernels::test;

namespace {
double gelu(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
double geluGrad(double x) {
  const double k = std::sqrt(2 / M_PI), u = k * (x + 0.044715 * x * x * x);
  const double t = std::tanh(u);
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
}
void gegluRef(const std::vector<double>& x, int N, int F, std::vector<double>& out) {
  out.assign(size_t(N) * F, 0);
  for (int i = 0; i < N; ++i)
    for (int c = 0; c < F; ++c)
      out[size_t(i) * F + c] = gelu(x[size_t(i) * 2 * F + c]) * x[size_t(i) * 2 * F + F + c];
}

class GeGlu : public OnBackend {};
}  // namespace

TEST_P(GeGlu, ForwardAndBackwardMatchFp64) {
  for (auto shape : {std::pair{7, 13}, {37, 67}, {1, 1}, {64, 600}}) {
    const int N = shape.first, F = shape.second;  // (lambdas capture them: no binding)
    auto x = randomVec(size_t(N) * 2 * F, 1, -4.0f, 4.0f);
    x[0] = 12.0f;
    if (F > 2) x[1] = -12.0f;
    const auto G = randomVec(size_t(N) * F, 2);
    auto run = [&](Backend& b) {
      DeviceBuffers d(b);
      float *out = d.poisoned(G.size()), *dx = d.poisoned(x.size());
      const float* dX = d.up(x);
      b.gegluForward(out, dX, N, F);
      b.gegluBackward(dx, dX, d.up(G), N, F);
      return std::pair{d.down(out, G.size()), d.down(dx, x.size())};
    };
    const auto [out, dx] = run(be());
    const auto xd = toDouble(x);
    std::vector<double> want, wdx(x.size());
    gegluRef(xd, N, F, want);
    for (int i = 0; i < N; ++i)
      for (int c = 0; c < F; ++c) {
        const double g = xd[size_t(i) * 2 * F + c], u = xd[size_t(i) * 2 * F + F + c];
        wdx[size_t(i) * 2 * F + c] = G[size_t(i) * F + c] * u * geluGrad(g);
        wdx[size_t(i) * 2 * F + F + c] = G[size_t(i) * F + c] * gelu(g);
      }
    EXPECT_TRUE(allClose(out, want, 1e-5, 1e-6)) << N << "x" << F;
    EXPECT_TRUE(allClose(dx, wdx, 1e-5, 1e-6)) << N << "x" << F;
    if (N * F <= 37 * 67) {
      std::vector<double> o;
      const auto fd = finiteDiff(xd, [&](const std::vector<double>& v) {
        gegluRef(v, N, F, o);
        return dot(o, toDouble(G));
      });
      EXPECT_TRUE(allClose(dx, fd, 1e-4, 1e-6)) << "fd " << N << "x" << F;
    }
    if (hasTwin()) {
      const auto [co, cdx] = run(cpu());
      EXPECT_TRUE(allClose(out, co, 1e-5, 1e-6)) << "vs cpu";
      EXPECT_TRUE(allClose(dx, cdx, 1e-5, 1e-6)) << "vs cpu";
    }
  }
}

// The gate's activation is geluForward's: with up = 1 the outputs agree bit for bit.
TEST_P(GeGlu, GateIsGeluForward) {
  const int N = 5, F = 33;
  auto x = randomVec(size_t(N) * 2 * F, 3, -6.0f, 6.0f);
  std::vector<float> gates(size_t(N) * F);
  for (int i = 0; i < N; ++i)
    for (int c = 0; c < F; ++c) {
      gates[size_t(i) * F + c] = x[size_t(i) * 2 * F + c];
      x[size_t(i) * 2 * F + F + c] = 1.0f;
    }
  DeviceBuffers d(be());
  float *out = d.poisoned(gates.size()), *ref = d.poisoned(gates.size());
  be().gegluForward(out, d.up(x), N, F);
  be().geluForward(ref, d.up(gates), int64_t(gates.size()));
  EXPECT_EQ(d.down(out, gates.size()), d.down(ref, gates.size()));
}

TS_ON_BACKEND(GeGlu);
