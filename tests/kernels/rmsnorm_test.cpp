// RMSNorm forward vs fp64; backward vs the fp64 gradient and central finite differences of a
// random projection of the fp64 forward. Runs on every backend the binary instantiates
// (OnBackend.h); CUDA is also compared with the CPU twin. Backward accumulates (+=), so its
// outputs start from random gradients instead of NaN.
#include <gtest/gtest.h>

#include <cmath>

#include "OnBackend.h"
#include "TestUtil.h"

using namespace ts::kernels;
using namespace ts::kernels::test;

namespace {
constexpr float kEps = 1e-5f;

void rmsRef(const std::vector<double>& x, const std::vector<double>& w, int N, int C,
            std::vector<double>& out, std::vector<double>* rstd = nullptr) {
  out.assign(size_t(N) * C, 0);
  if (rstd) rstd->assign(N, 0);
  for (int i = 0; i < N; ++i) {
    double ss = 0;
    for (int c = 0; c < C; ++c) ss += x[size_t(i) * C + c] * x[size_t(i) * C + c];
    const double rs = 1.0 / std::sqrt(ss / C + kEps);
    for (int c = 0; c < C; ++c) out[size_t(i) * C + c] = x[size_t(i) * C + c] * rs * w[c];
    if (rstd) (*rstd)[i] = rs;
  }
}

// d/dx and d/dw of sum(out * G), in fp64.
void rmsGradRef(const std::vector<double>& x, const std::vector<double>& w,
                const std::vector<double>& G, int N, int C, std::vector<double>& dx,
                std::vector<double>& dw) {
  dx.assign(x.size(), 0);
  dw.assign(C, 0);
  for (int i = 0; i < N; ++i) {
    const double* xi = &x[size_t(i) * C];
    const double* g = &G[size_t(i) * C];
    double ss = 0;
    for (int c = 0; c < C; ++c) ss += xi[c] * xi[c];
    const double rs = 1.0 / std::sqrt(ss / C + kEps);
    double dot = 0;  // sum_c w g x
    for (int c = 0; c < C; ++c) dot += w[c] * g[c] * xi[c];
    for (int c = 0; c < C; ++c) {
      dx[size_t(i) * C + c] = w[c] * g[c] * rs - xi[c] * rs * rs * rs * dot / C;
      dw[c] += xi[c] * rs * g[c];
    }
  }
}

class RmsNorm : public OnBackend {};

struct Shape {
  int N, C;
};
}  // namespace

TEST_P(RmsNorm, ForwardMatchesFp64) {
  for (Shape s : {Shape{7, 13}, {37, 67}, {1, 1}, {5, 768}, {300, 129}}) {
    const auto x = randomVec(size_t(s.N) * s.C, 1, -2.0f, 3.0f), w = randomVec(s.C, 2);
    auto run = [&](Backend& b) {
      DeviceBuffers d(b);
      float *out = d.poisoned(x.size()), *rstd = d.poisoned(s.N);
      b.rmsnormForward(out, rstd, d.up(x), d.up(w), s.N, s.C, kEps);
      return std::pair{d.down(out, x.size()), d.down(rstd, s.N)};
    };
    const auto [out, rstd] = run(be());
    std::vector<double> want, wr;
    rmsRef(toDouble(x), toDouble(w), s.N, s.C, want, &wr);
    EXPECT_TRUE(allClose(out, want, 1e-5, 1e-6)) << s.N << "x" << s.C;
    EXPECT_TRUE(allClose(rstd, wr, 1e-5, 1e-7)) << s.N << "x" << s.C;
    if (hasTwin()) {
      const auto [co, cr] = run(cpu());
      EXPECT_TRUE(allClose(out, co, 1e-5, 1e-6)) << "vs cpu " << s.N << "x" << s.C;
      EXPECT_TRUE(allClose(rstd, cr, 1e-5, 1e-7)) << "vs cpu " << s.N << "x" << s.C;
    }
  }
}

TEST_P(RmsNorm, BackwardAccumulatesFp64GradientAndMatchesFiniteDifferences) {
  for (Shape s : {Shape{7, 13}, {37, 67}, {1, 1}, {300, 129}}) {
    const auto x = randomVec(size_t(s.N) * s.C, 4, -2.0f, 2.0f), w = randomVec(s.C, 5);
    const auto G = randomVec(x.size(), 7);  // dL/dout for L = sum(out * G)
    const auto dx0 = randomVec(x.size(), 8), dw0 = randomVec(s.C, 9);  // prior gradients
    auto run = [&](Backend& b) {
      DeviceBuffers d(b);
      float *out = d.poisoned(x.size()), *rstd = d.poisoned(s.N);
      float *dx = d.up(dx0), *dw = d.up(dw0);
      const float *dX = d.up(x), *dW = d.up(w);
      b.rmsnormForward(out, rstd, dX, dW, s.N, s.C, kEps);
      b.rmsnormBackward(dx, dw, d.up(G), dX, dW, rstd, s.N, s.C);
      return std::pair{d.down(dx, x.size()), d.down(dw, s.C)};
    };
    const auto [dx, dw] = run(be());
    const auto xd = toDouble(x), wd = toDouble(w), Gd = toDouble(G);
    std::vector<double> gx, gw;
    rmsGradRef(xd, wd, Gd, s.N, s.C, gx, gw);
    for (size_t i = 0; i < gx.size(); ++i) gx[i] += dx0[i];
    for (int c = 0; c < s.C; ++c) gw[c] += dw0[c];
    EXPECT_TRUE(allClose(dx, gx, 1e-4, 1e-5)) << s.N << "x" << s.C;
    EXPECT_TRUE(allClose(dw, gw, 1e-4, 1e-5)) << s.N << "x" << s.C;
    if (s.N * s.C <= 37 * 67) {  // the reference gradient itself, against finite differences
      std::vector<double> o;
      auto fx = finiteDiff(xd, [&](const std::vector<double>& v) {
        rmsRef(v, wd, s.N, s.C, o);
        return dot(o, Gd);
      });
      auto fw = finiteDiff(wd, [&](const std::vector<double>& v) {
        rmsRef(xd, v, s.N, s.C, o);
        return dot(o, Gd);
      });
      for (size_t i = 0; i < fx.size(); ++i) fx[i] += dx0[i];
      for (int c = 0; c < s.C; ++c) fw[c] += dw0[c];
      EXPECT_TRUE(allClose(dx, fx, 1e-4, 1e-5)) << "fd " << s.N << "x" << s.C;
      EXPECT_TRUE(allClose(dw, fw, 1e-4, 1e-5)) << "fd " << s.N << "x" << s.C;
    }
    if (hasTwin()) {
      const auto [cx, cw] = run(cpu());
      EXPECT_TRUE(allClose(dx, cx, 1e-4, 1e-6)) << "vs cpu " << s.N << "x" << s.C;
      EXPECT_TRUE(allClose(dw, cw, 1e-4, 1e-6)) << "vs cpu " << s.N << "x" << s.C;
    }
  }
}

// Fixed summation order: the same thread count gives the same bits (on CUDA, setThreads does
// nothing and both runs must agree bitwise).
TEST_P(RmsNorm, BackwardDeterministic) {
  const int N = 257, C = 193;  // large enough to take the CPU's threaded path
  const auto x = randomVec(size_t(N) * C, 11), w = randomVec(C, 12), G = randomVec(x.size(), 14);
  auto run = [&](int threads) {
    be().setThreads(threads);
    DeviceBuffers d(be());
    float* out = d.poisoned(x.size());
    float* rstd = d.poisoned(N);
    float* grads = d.up(std::vector<float>(x.size() + C, 0.0f));
    const float *dX = d.up(x), *dW = d.up(w);
    be().rmsnormForward(out, rstd, dX, dW, N, C, kEps);
    be().rmsnormBackward(grads, grads + x.size(), d.up(G), dX, dW, rstd, N, C);
    return d.down(grads, x.size() + C);
  };
  const auto one = run(1), two = run(2), twoAgain = run(2);
  be().setThreads(0);
  EXPECT_TRUE(allClose(two, one, 1e-5, 1e-5));
  EXPECT_EQ(two, twoAgain);
}

TS_ON_BACKEND(RmsNorm);
