// RMSNorm over groups (rmsnormGroups*) vs fp64: per-head q and k norms inside packed qkv rows
// (G > 1, strided; the v heads and the other heads stay untouched), whole rows (G = 1, which is
// rmsnormForward for weightOffset 0), Gemma's (1 + w) with weightOffset 1; backward accumulated
// and written, in place (dinp = dout), with and without dweight, against the fp64 gradient and
// central differences. Outputs start as NaN bytes where written. Runs on every instantiated
// backend (OnBackend.h), CUDA also against the CPU twin.
#include <gtest/gtest.h>

#include <cmath>

#include "OnBackend.h"
#include "TestUtil.h"

using namespace ts::kernels;
using namespace ts::kernels::test;

namespace {
constexpr float kEps = 1e-6f;

struct Case {
  int N, G, D;
  int64_t stride, off;  // groups of row n at off + n*stride + g*D
  float wOff;
  size_t size() const { return size_t(off + (N - 1) * stride + int64_t(G) * D); }
  bool inGroup(size_t i) const {
    if (int64_t(i) < off) return false;
    const int64_t r = (int64_t(i) - off) % stride;
    return r < int64_t(G) * D && (int64_t(i) - off) / stride < N;
  }
};
const Case kCases[] = {{37, 4, 24, 192, 0, 0.0f},  {37, 2, 24, 192, 96, 1.0f},
                       {7, 1, 67, 67, 0, 0.0f},    {5, 1, 768, 768, 0, 1.0f},
                       {300, 8, 16, 200, 8, 1.0f}, {3, 3, 5, 40, 2, 0.0f}};

// out / gradients over the groups, fp64 (other elements left as they are).
void groupsRef(const std::vector<double>& x, const std::vector<double>& w, const Case& c,
               std::vector<double>& out, std::vector<double>* rstd = nullptr,
               const std::vector<double>* G = nullptr, std::vector<double>* dx = nullptr,
               std::vector<double>* dw = nullptr) {
  for (int n = 0; n < c.N; ++n)
    for (int g = 0; g < c.G; ++g) {
      const size_t at = size_t(c.off + n * c.stride + int64_t(g) * c.D);
      double ss = 0;
      for (int e = 0; e < c.D; ++e) ss += x[at + e] * x[at + e];
      const double rs = 1 / std::sqrt(ss / c.D + kEps);
      if (rstd) (*rstd)[size_t(n) * c.G + g] = rs;
      double dot = 0;
      for (int e = 0; e < c.D; ++e) {
        out[at + e] = x[at + e] * rs * (c.wOff + w[e]);
        if (G) dot += (c.wOff + w[e]) * (*G)[at + e] * x[at + e];
      }
      if (!G) continue;
      for (int e = 0; e < c.D; ++e) {
        (*dx)[at + e] = (c.wOff + w[e]) * (*G)[at + e] * rs - x[at + e] * rs * rs * rs * dot / c.D;
        (*dw)[e] += x[at + e] * rs * (*G)[at + e];
      }
    }
}

class RmsNormGroups : public OnBackend {};
}  // namespace

TEST_P(RmsNormGroups, ForwardMatchesFp64AndTouchesOnlyTheGroups) {
  for (const Case& c : kCases) {
    const size_t n = c.size();
    const auto x = randomVec(n, 1, -2.0f, 3.0f), w = randomVec(c.D, 2);
    auto run = [&](Backend& b) {
      DeviceBuffers d(b);
      float *out = d.poisoned(n), *rstd = d.poisoned(size_t(c.N) * c.G), *xi = d.up(x);
      const float* dw = d.up(w);
      b.rmsnormGroupsForward(out + c.off, rstd, xi + c.off, dw, c.N, c.G, c.D, c.stride, kEps,
                             c.wOff);
      b.rmsnormGroupsForward(xi + c.off, rstd, xi + c.off, dw, c.N, c.G, c.D, c.stride, kEps,
                             c.wOff);
      return std::tuple{d.down(out, n), d.down(rstd, size_t(c.N) * c.G), d.down(xi, n)};
    };
    const auto [out, rstd, inPlace] = run(be());
    std::vector<double> want = toDouble(x), wr(size_t(c.N) * c.G);
    groupsRef(toDouble(x), toDouble(w), c, want, &wr);
    for (size_t i = 0; i < n; ++i) {
      if (c.inGroup(i)) {
        ASSERT_NEAR(out[i], want[i], 1e-5 * std::fabs(want[i]) + 1e-6) << i;
      } else {
        ASSERT_TRUE(DeviceBuffers::isPoison(out[i])) << "outside the groups at " << i;
        ASSERT_EQ(inPlace[i], x[i]) << "outside the groups at " << i;
      }
    }
    EXPECT_TRUE(allClose(inPlace, want, 1e-5, 1e-6));
    EXPECT_TRUE(allClose(rstd, wr, 1e-5, 1e-7));
    if (hasTwin()) {
      const auto [co, cr, ci] = run(cpu());
      EXPECT_TRUE(allClose(inPlace, ci, 1e-5, 1e-6)) << "vs cpu";
      EXPECT_TRUE(allClose(rstd, cr, 1e-5, 1e-7)) << "vs cpu";
    }
  }
}

// Accumulated (+= on random prior gradients), written out of place (poisoned outside the
// groups stays poisoned) and in place (dinp = dout, the rest of dout untouched); dweight +=
// or null.
TEST_P(RmsNormGroups, BackwardMatchesFp64) {
  for (const Case& c : kCases) {
    const size_t n = c.size();
    const auto x = randomVec(n, 4, -2.0f, 2.0f), w = randomVec(c.D, 5), G = randomVec(n, 7);
    const auto dx0 = randomVec(n, 8), dw0 = randomVec(c.D, 9);
    auto run = [&](Backend& b) {
      DeviceBuffers d(b);
      float *out = d.poisoned(n), *rstd = d.poisoned(size_t(c.N) * c.G);
      const float *dX = d.up(x) + c.off, *dW = d.up(w), *dG = d.up(G) + c.off;
      b.rmsnormGroupsForward(out + c.off, rstd, dX, dW, c.N, c.G, c.D, c.stride, kEps, c.wOff);
      float *acc = d.up(dx0), *dw = d.up(dw0), *wr = d.poisoned(n), *inPlace = d.up(G);
      b.rmsnormGroupsBackward(acc + c.off, dw, dG, dX, dW, rstd, c.N, c.G, c.D, c.stride, c.wOff,
                              true);
      b.rmsnormGroupsBackward(wr + c.off, nullptr, dG, dX, dW, rstd, c.N, c.G, c.D, c.stride,
                              c.wOff, false);
      b.rmsnormGroupsBackward(inPlace + c.off, nullptr, inPlace + c.off, dX, dW, rstd, c.N, c.G,
                              c.D, c.stride, c.wOff, false);
      return std::tuple{d.down(acc, n), d.down(dw, c.D), d.down(wr, n), d.down(inPlace, n)};
    };
    const auto [acc, dw, wr, inPlace] = run(be());
    const auto xd = toDouble(x), wd = toDouble(w), Gd = toDouble(G);
    std::vector<double> o(n), gx(n, 0.0), gw(c.D, 0.0);
    groupsRef(xd, wd, c, o, nullptr, &Gd, &gx, &gw);
    std::vector<double> wantAcc = toDouble(dx0), wantIn = Gd;
    for (size_t i = 0; i < n; ++i)
      if (c.inGroup(i)) {
        wantAcc[i] += gx[i];
        wantIn[i] = gx[i];
        ASSERT_NEAR(wr[i], gx[i], 1e-4 * std::fabs(gx[i]) + 1e-5) << i;
      } else {
        ASSERT_TRUE(DeviceBuffers::isPoison(wr[i])) << "outside the groups at " << i;
      }
    for (int e = 0; e < c.D; ++e) gw[e] += dw0[e];
    EXPECT_TRUE(allClose(acc, wantAcc, 1e-4, 1e-5));
    EXPECT_TRUE(allClose(dw, gw, 1e-4, 1e-5));
    EXPECT_TRUE(allClose(inPlace, wantIn, 1e-4, 1e-5));
    if (n <= 2000) {  // the reference gradient itself, against finite differences
      const auto fx = finiteDiff(xd, [&](const std::vector<double>& v) {
        std::vector<double> out(n, 0.0);
        groupsRef(v, wd, c, out);
        double s = 0;
        for (size_t i = 0; i < n; ++i)
          if (c.inGroup(i)) s += out[i] * Gd[i];
        return s;
      });
      std::vector<float> got;
      std::vector<double> fdAt;
      for (size_t i = 0; i < n; ++i)
        if (c.inGroup(i)) {
          got.push_back(wr[i]);
          fdAt.push_back(fx[i]);
        }
      EXPECT_TRUE(allClose(got, fdAt, 1e-4, 1e-5)) << "fd";
    }
    if (hasTwin()) {
      const auto [ca, cw, cwr, ci] = run(cpu());
      EXPECT_TRUE(allClose(acc, ca, 1e-4, 1e-6)) << "vs cpu";
      EXPECT_TRUE(allClose(dw, cw, 1e-4, 1e-6)) << "vs cpu";
      EXPECT_TRUE(allClose(inPlace, ci, 1e-4, 1e-6)) << "vs cpu";
    }
  }
}

// G = 1, D = stride = C, weightOffset 0 is rmsnormForward.
TEST_P(RmsNormGroups, WholeRowsEqualRmsNorm) {
  const int N = 37, C = 67;
  const auto x = randomVec(size_t(N) * C, 11), w = randomVec(C, 12);
  DeviceBuffers d(be());
  const float *dX = d.up(x), *dW = d.up(w);
  float *a = d.poisoned(x.size()), *ra = d.poisoned(N), *b = d.poisoned(x.size()),
        *rb = d.poisoned(N);
  be().rmsnormGroupsForward(a, ra, dX, dW, N, 1, C, C, kEps, 0.0f);
  be().rmsnormForward(b, rb, dX, dW, N, C, kEps);
  EXPECT_TRUE(allClose(d.down(a, x.size()), d.down(b, x.size()), 1e-6, 1e-7));
  EXPECT_TRUE(allClose(d.down(ra, N), d.down(rb, N), 1e-6, 1e-7));
}

TS_ON_BACKEND(RmsNormGroups);
