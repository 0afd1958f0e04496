// RoPE from a table (ropeTable*) vs an fp64 reference: tables of scaled cos/sin (not plain unit
// rotations: the rope types' attention factor), partial rotary (RD < HD: the tail passes
// through, copied out of place) and RD == HD, the q and k heads of a packed qkv in place and
// out of place into a poisoned padded buffer (only the view is written), backward the fp64
// transpose rotation in and out of place; odd RD or RD > HD throw. Runs on every instantiated
// backend (OnBackend.h), CUDA also against the CPU twin.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "OnBackend.h"
#include "TestUtil.h"

using namespace ts::kernels;
using namespace ts::kernels::test;

namespace {
// dst view = R src view (R^T with transpose), fp64, from the table: rotate_half on the first
// RD dims of each head, the rest copied.
void ropeRef(std::vector<double>& dst, int64_t dstOff, int dstStride,
             const std::vector<double>& src, int64_t srcOff, int srcStride, int B, int T, int NH,
             int HD, int RD, const std::vector<float>& table, bool transpose) {
  const int half = RD / 2;
  const double sign = transpose ? -1 : 1;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < NH; ++h) {
        const double* x = &src[srcOff + (int64_t(b) * T + t) * srcStride + int64_t(h) * HD];
        double* y = &dst[dstOff + (int64_t(b) * T + t) * dstStride + int64_t(h) * HD];
        std::vector<double> r(x, x + HD);
        for (int i = 0; i < half; ++i) {
          const double c = table[size_t(t) * RD + i], s = sign * table[size_t(t) * RD + half + i];
          r[i] = x[i] * c - x[i + half] * s;
          r[i + half] = x[i + half] * c + x[i] * s;
        }
        for (int d = 0; d < HD; ++d) y[d] = r[d];
      }
}

// Per position: an attention factor times cos/sin of angles from a scaled frequency ladder.
std::vector<float> makeTable(int T, int RD, double factor) {
  std::vector<float> tab(size_t(T) * RD);
  const int half = RD / 2;
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < half; ++i) {
      const double a = t * std::pow(10000.0, -2.0 * i / RD) / (i % 3 == 0 ? 4.0 : 1.0);
      tab[size_t(t) * RD + i] = float(factor * std::cos(a));
      tab[size_t(t) * RD + half + i] = float(factor * std::sin(a));
    }
  return tab;
}

struct Case {
  int B, T, NH, KVH, HD, RD;
};
const Case kCases[] = {{2, 37, 4, 2, 16, 16},   {1, 37, 4, 2, 24, 8},  {2, 5, 3, 1, 64, 32},
                       {1, 70, 2, 1, 128, 128}, {1, 37, 2, 2, 96, 24}, {1, 3, 2, 1, 10, 0}};

class RopeTable : public OnBackend {};
}  // namespace

// The q heads then the k heads of packed qkv rotated in place: v untouched, fp64 values.
TEST_P(RopeTable, ForwardInPlaceOnPackedQkvMatchesFp64) {
  for (const Case& c : kCases) {
    const int W = (c.NH + 2 * c.KVH) * c.HD, kOff = c.NH * c.HD;
    const size_t n = size_t(c.B) * c.T * W;
    const auto qkv = randomVec(n, 1, -2.0f, 2.0f);
    const auto tab = makeTable(c.T, c.RD, 1.25);
    auto run = [&](Backend& b) {
      DeviceBuffers d(b);
      float* x = d.up(qkv);
      const float* t = d.up(tab.empty() ? std::vector<float>(1, 0.0f) : tab);
      b.ropeTableForward(x, x, c.B, c.T, c.NH, c.HD, c.RD, W, W, t);
      b.ropeTableForward(x + kOff, x + kOff, c.B, c.T, c.KVH, c.HD, c.RD, W, W, t);
      return d.down(x, n);
    };
    const auto got = run(be());
    auto want = toDouble(qkv);
    const auto src = want;
    ropeRef(want, 0, W, src, 0, W, c.B, c.T, c.NH, c.HD, c.RD, tab, false);
    ropeRef(want, kOff, W, src, kOff, W, c.B, c.T, c.KVH, c.HD, c.RD, tab, false);
    EXPECT_TRUE(allClose(got, want, 1e-6, 1e-6)) << c.HD << "/" << c.RD;
    if (hasTwin()) EXPECT_TRUE(allClose(got, run(cpu()), 1e-6, 1e-6)) << "vs cpu " << c.HD;
  }
}

// Out of place from packed qkv into a padded (stride HD*NH + 5) poisoned buffer: the view is
// written (pass-through dims copied), the padding keeps its poison; backward likewise and in
// place, the fp64 transpose rotation.
TEST_P(RopeTable, OutOfPlaceAndBackwardMatchFp64) {
  for (const Case& c : kCases) {
    const int W = (c.NH + 2 * c.KVH) * c.HD, P = c.NH * c.HD + 5;
    const size_t n = size_t(c.B) * c.T * W, np = size_t(c.B) * c.T * P;
    const auto qkv = randomVec(n, 2, -2.0f, 2.0f), g = randomVec(np, 3);
    const auto tab = makeTable(c.T, c.RD, 0.8);
    auto run = [&](Backend& b) {
      DeviceBuffers d(b);
      const float* t = d.up(tab.empty() ? std::vector<float>(1, 0.0f) : tab);
      float *y = d.poisoned(np), *dx = d.poisoned(n), *dg = d.up(g);
      b.ropeTableForward(y, d.up(qkv), c.B, c.T, c.NH, c.HD, c.RD, P, W, t);
      b.ropeTableBackward(dx, dg, c.B, c.T, c.NH, c.HD, c.RD, W, P, t);
      b.ropeTableBackward(dg, dg, c.B, c.T, c.NH, c.HD, c.RD, P, P, t);
      return std::tuple{d.down(y, np), d.down(dx, n), d.down(dg, np)};
    };
    const auto [y, dx, dgIn] = run(be());
    std::vector<double> wy(np, 0), wdx(n, 0), wdg = toDouble(g);
    const auto src = toDouble(qkv), gd = toDouble(g);
    ropeRef(wy, 0, P, src, 0, W, c.B, c.T, c.NH, c.HD, c.RD, tab, false);
    ropeRef(wdx, 0, W, gd, 0, P, c.B, c.T, c.NH, c.HD, c.RD, tab, true);
    ropeRef(wdg, 0, P, gd, 0, P, c.B, c.T, c.NH, c.HD, c.RD, tab, true);
    for (size_t i = 0; i < np; ++i) {
      if (int(i % P) >= c.NH * c.HD) {
        ASSERT_TRUE(DeviceBuffers::isPoison(y[i])) << "padding written at " << i;
        continue;
      }
      ASSERT_NEAR(y[i], wy[i], 1e-6 + 1e-6 * std::fabs(wy[i])) << i;
    }
    for (size_t i = 0; i < n; ++i)
      if (int(i % W) < c.NH * c.HD)
        ASSERT_NEAR(dx[i], wdx[i], 1e-6 + 1e-6 * std::fabs(wdx[i]));
      else
        ASSERT_TRUE(DeviceBuffers::isPoison(dx[i])) << "outside the view at " << i;
    EXPECT_TRUE(allClose(dgIn, wdg, 1e-6, 1e-6)) << c.HD << "/" << c.RD;
    if (hasTwin()) {
      const auto [cy, cdx, cdg] = run(cpu());
      EXPECT_TRUE(allClose(dgIn, cdg, 1e-6, 1e-6)) << "vs cpu " << c.HD;
    }
  }
}

TEST_P(RopeTable, OddOrTooManyRotaryDimsThrow) {
  DeviceBuffers d(be());
  float* x = d.poisoned(64);
  EXPECT_THROW(be().ropeTableForward(x, x, 1, 1, 1, 16, 7, 16, 16, x), std::invalid_argument);
  EXPECT_THROW(be().ropeTableBackward(x, x, 1, 1, 1, 16, 18, 16, 16, x), std::invalid_argument);
}

TS_ON_BACKEND(RopeTable);
