// Tanh soft-capping (Gemma 2's final logits) vs fp64: the capped values, the kept derivative
// against the analytic one and central differences of cap tanh(x / cap), and backward's
// product. Outputs start as NaN bytes. Runs on every instantiated backend (OnBackend.h), CUDA
// also against the CPU twin.
#include <gtest/gtest.h>

#include <cmath>

#include "OnBackend.h"
#include "TestUtil.h"

using namespace ts::kernels;
using namespace ts::kernels::test;

namespace {
class Softcap : public OnBackend {};
}  // namespace

TEST_P(Softcap, ForwardAndBackwardMatchFp64) {
  for (auto c : {std::pair{int64_t(37), 2.0f}, {int64_t(4099), 30.0f}, {int64_t(1), 0.5f}}) {
    const int64_t n = c.first;  // (lambdas capture them: no binding)
    const float cap = c.second;
    auto x = randomVec(size_t(n), 5, -40.0f, 40.0f);
    const auto g = randomVec(size_t(n), 6);
    auto run = [&](Backend& b) {
      DeviceBuffers d(b);
      float* xs = d.up(x);
      float *grad = d.poisoned(size_t(n)), *dx = d.up(g);
      b.softcapForward(xs, grad, n, cap);
      b.softcapBackward(dx, grad, n);
      return std::pair{d.down(xs, size_t(n)), d.down(dx, size_t(n))};
    };
    const auto [y, dy] = run(be());
    const size_t count = static_cast<size_t>(n);
    std::vector<double> wy(count), wdy(count), fd(count);
    for (size_t i = 0; i < size_t(n); ++i) {
      const double t = std::tanh(double(x[i]) / cap);
      wy[i] = cap * t;
      wdy[i] = g[i] * (1 - t * t);
      const double h = 1e-4 * std::max(1.0, std::abs(double(x[i])));
      fd[i] =
          g[i] * (cap * std::tanh((x[i] + h) / cap) - cap * std::tanh((x[i] - h) / cap)) / (2 * h);
    }
    EXPECT_TRUE(allClose(y, wy, 1e-6, 1e-6)) << n;
    EXPECT_TRUE(allClose(dy, wdy, 1e-5, 1e-6)) << n;
    EXPECT_TRUE(allClose(dy, fd, 1e-4, 1e-6)) << n;
    if (hasTwin()) {
      const auto [cy, cdy] = run(cpu());
      EXPECT_TRUE(allClose(y, cy, 1e-6, 1e-6));
      EXPECT_TRUE(allClose(dy, cdy, 1e-6, 1e-6));
    }
  }
}

TS_ON_BACKEND(Softcap);
