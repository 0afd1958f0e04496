// LayerNorm forward vs fp64; backward vs central finite differences of the fp64 forward.
#include <gtest/gtest.h>

#include <cmath>

#include "TestUtil.h"
#include "trainscope/kernels/Backend.h"

using namespace ts::kernels;
using namespace ts::kernels::test;

namespace {
constexpr float kEps = 1e-5f;

// out = LN(x) in double; also mean/rstd.
void lnRef(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
           int N, int C, std::vector<double>& out, std::vector<double>* mean = nullptr,
           std::vector<double>* rstd = nullptr) {
  out.assign(size_t(N) * C, 0);
  for (int i = 0; i < N; ++i) {
    double mu = 0, var = 0;
    for (int c = 0; c < C; ++c) mu += x[size_t(i) * C + c];
    mu /= C;
    for (int c = 0; c < C; ++c) var += std::pow(x[size_t(i) * C + c] - mu, 2);
    var /= C;
    const double rs = 1.0 / std::sqrt(var + kEps);
    for (int c = 0; c < C; ++c)
      out[size_t(i) * C + c] = (x[size_t(i) * C + c] - mu) * rs * w[c] + b[c];
    if (mean) (*mean)[i] = mu;
    if (rstd) (*rstd)[i] = rs;
  }
}
}  // namespace

TEST(LayerNorm, ForwardMatchesFp64) {
  auto be = makeCpuBackend();
  for (auto [N, C] : {std::pair{7, 13}, {37, 61}, {1, 1}, {5, 768}, {300, 129}}) {
    const auto x = randomVec(size_t(N) * C, 1, -2.0f, 3.0f);
    const auto w = randomVec(C, 2), b = randomVec(C, 3);
    auto out = nanVec(x.size()), mean = nanVec(N), rstd = nanVec(N);
    be->layernormForward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C,
                         kEps);
    std::vector<double> want, wm(N), wr(N);
    lnRef(toDouble(x), toDouble(w), toDouble(b), N, C, want, &wm, &wr);
    EXPECT_TRUE(allClose(out, want, 1e-5, 1e-5)) << N << "x" << C;
    EXPECT_TRUE(allClose(mean, wm, 1e-5, 1e-6));
    EXPECT_TRUE(allClose(rstd, wr, 1e-4, 1e-6));
  }
}

TEST(LayerNorm, BackwardMatchesFiniteDifferencesAndAccumulates) {
  auto be = makeCpuBackend();
  for (auto shape : {std::pair{7, 13}, {3, 37}}) {
    const int N = shape.first, C = shape.second;  // not a binding: lambdas capture these
    const auto x = randomVec(size_t(N) * C, 4, -2.0f, 2.0f);
    const auto w = randomVec(C, 5), b = randomVec(C, 6);
    const auto G = randomVec(x.size(), 7);  // dL/dout for L = sum(out * G)
    std::vector<float> out(x.size()), mean(N), rstd(N);
    be->layernormForward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C,
                         kEps);
    // Pre-filled gradients: the op must add to them.
    const auto dx0 = randomVec(x.size(), 8), dw0 = randomVec(C, 9), db0 = randomVec(C, 10);
    auto dx = dx0, dw = dw0, db = db0;
    be->layernormBackward(dx.data(), dw.data(), db.data(), G.data(), x.data(), w.data(),
                          mean.data(), rstd.data(), N, C);

    const auto xd = toDouble(x), wd = toDouble(w), bd = toDouble(b), Gd = toDouble(G);
    std::vector<double> o;
    auto fx = [&](const std::vector<double>& v) {
      lnRef(v, wd, bd, N, C, o);
      return dot(o, Gd);
    };
    auto fw = [&](const std::vector<double>& v) {
      lnRef(xd, v, bd, N, C, o);
      return dot(o, Gd);
    };
    auto fb = [&](const std::vector<double>& v) {
      lnRef(xd, wd, v, N, C, o);
      return dot(o, Gd);
    };
    auto gx = finiteDiff(xd, fx), gw = finiteDiff(wd, fw), gb = finiteDiff(bd, fb);
    for (size_t i = 0; i < gx.size(); ++i) gx[i] += dx0[i];
    for (int c = 0; c < C; ++c) gw[c] += dw0[c], gb[c] += db0[c];
    EXPECT_TRUE(allClose(dx, gx, 1e-4, 1e-4));
    EXPECT_TRUE(allClose(dw, gw, 1e-4, 1e-4));
    EXPECT_TRUE(allClose(db, gb, 1e-4, 1e-4));
  }
}

TEST(LayerNorm, BackwardThreadedMatchesSingleThread) {
  auto be = makeCpuBackend();
  const int N = 257, C = 193;  // large enough to take the threaded path
  const auto x = randomVec(size_t(N) * C, 11), w = randomVec(C, 12), b = randomVec(C, 13);
  const auto G = randomVec(x.size(), 14);
  std::vector<float> out(x.size()), mean(N), rstd(N);
  be->layernormForward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C,
                       kEps);
  auto run = [&](int threads) {
    be->setThreads(threads);
    std::vector<float> r(x.size() + 2 * C, 0.0f);
    be->layernormBackward(r.data(), r.data() + x.size(), r.data() + x.size() + C, G.data(),
                          x.data(), w.data(), mean.data(), rstd.data(), N, C);
    return r;
  };
  const auto one = run(1), two = run(2), twoAgain = run(2);
  be->setThreads(0);
  EXPECT_TRUE(allClose(two, one, 1e-5, 1e-5));
  EXPECT_EQ(two, twoAgain);  // deterministic for a fixed thread count
}
