// RoPE (rotate_half convention) vs an fp64 reference, on the q and k heads of a packed qkv
// buffer, in place and out of place; backward vs the fp64 transpose rotation and central
// finite differences; closed-form values pin the convention (position 0 is the identity, the
// partner of dim i is i + HD/2, a known angle). Runs on every instantiated backend
// (OnBackend.h), CUDA also against the CPU twin.
#include <gtest/gtest.h>

#include <cmath>

#include "OnBackend.h"
#include "TestUtil.h"

using namespace ts::kernels;
using namespace ts::kernels::test;

namespace {
// dst view = R(sign * angle) src view, fp64, as transformers' apply_rotary_pos_emb. Only the
// (B, T, NH, HD) view is written.
void ropeRef(std::vector<double>& dst, int64_t dstOff, int dstStride,
             const std::vector<double>& src, int64_t srcOff, int srcStride, int B, int T, int NH,
             int HD, double theta, double sign) {
  const int half = HD / 2;
  std::vector<double> cs(size_t(T) * HD), sn(size_t(T) * HD), r(HD);
  for (int t = 0; t < T; ++t)
    for (int d = 0; d < HD; ++d) {  // cos/sin of t * inv_freq, repeated over both halves
      const double a = sign * t * std::pow(theta, -2.0 * (d % half) / HD);
      cs[size_t(t) * HD + d] = std::cos(a);
      sn[size_t(t) * HD + d] = std::sin(a);
    }
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < NH; ++h) {
        const double* x = &src[srcOff + (int64_t(b) * T + t) * srcStride + int64_t(h) * HD];
        double* y = &dst[dstOff + (int64_t(b) * T + t) * dstStride + int64_t(h) * HD];
        for (int d = 0; d < HD; ++d) {
          const double rot = d < half ? -x[d + half] : x[d - half];  // rotate_half
          r[d] = x[d] * cs[size_t(t) * HD + d] + rot * sn[size_t(t) * HD + d];
        }
        for (int d = 0; d < HD; ++d) y[d] = r[d];
      }
}

struct Case {
  int B, T, NH, KVH, HD;
  float theta;
};
const Case kCases[] = {{2, 37, 4, 2, 16, 10000.0f},
                       {1, 37, 6, 3, 64, 10000.0f},
                       {2, 37, 4, 4, 128, 500000.0f},
                       {1, 1, 2, 1, 16, 10000.0f},
                       {1, 70, 3, 1, 64, 10000.0f}};

class Rope : public OnBackend {};
}  // namespace

// Rotating the q heads and then the k heads of packed qkv in place leaves v untouched and
// matches fp64; out of place into a padded buffer writes exactly the view.
TEST_P(Rope, ForwardOnPackedQkvMatchesFp64) {
  for (const Case& c : kCases) {
    const int W = (c.NH + 2 * c.KVH) * c.HD;  // qkv row width
    const size_t n = size_t(c.B) * c.T * W;
    const auto qkv = randomVec(n, 1, -2.0f, 2.0f);
    const int kOff = c.NH * c.HD;
    auto run = [&](Backend& b) {
      DeviceBuffers d(b);
      float* x = d.up(qkv);
      b.ropeForward(x, x, c.B, c.T, c.NH, c.HD, W, W, c.theta);
      b.ropeForward(x + kOff, x + kOff, c.B, c.T, c.KVH, c.HD, W, W, c.theta);
      return d.down(x, n);
    };
    const auto got = run(be());
    auto want = toDouble(qkv);
    const auto src = want;
    ropeRef(want, 0, W, src, 0, W, c.B, c.T, c.NH, c.HD, c.theta, 1);
    ropeRef(want, kOff, W, src, kOff, W, c.B, c.T, c.KVH, c.HD, c.theta, 1);
    // Angles up to T rad: fp32 sin/cos of them are good to ~1e-7 absolute.
    EXPECT_TRUE(allClose(got, want, 1e-6, 1e-6)) << c.HD << " " << c.NH << "/" << c.KVH;
    for (size_t i = 0; i < n; ++i)  // the v heads are not touched
      if (int(i % W) >= (c.NH + c.KVH) * c.HD) {
        ASSERT_EQ(got[i], qkv[i]) << i;
      }
    if (hasTwin()) {
      EXPECT_TRUE(allClose(got, run(cpu()), 1e-6, 1e-6)) << "vs cpu " << c.HD;
    }

    // Out of place: the k heads into a buffer with 3 floats of padding per row.
    const int P = c.KVH * c.HD + 3;
    auto runOut = [&](Backend& b) {
      DeviceBuffers d(b);
      float* out = d.poisoned(size_t(c.B) * c.T * P);
      b.ropeForward(out, d.up(qkv) + kOff, c.B, c.T, c.KVH, c.HD, P, W, c.theta);
      return d.down(out, size_t(c.B) * c.T * P);
    };
    const auto out = runOut(be());
    std::vector<double> wantOut(out.size(), 0.0);
    ropeRef(wantOut, 0, P, src, kOff, W, c.B, c.T, c.KVH, c.HD, c.theta, 1);
    for (size_t i = 0; i < out.size(); ++i) {
      if (int(i % P) >= c.KVH * c.HD) {
        ASSERT_TRUE(DeviceBuffers::isPoison(out[i])) << "padding written at " << i;
      } else {
        ASSERT_NEAR(out[i], wantOut[i], 1e-6 + 1e-6 * std::fabs(wantOut[i])) << i;
      }
    }
    // In place and out of place give the same bits.
    for (size_t r = 0; r < size_t(c.B) * c.T; ++r)
      for (int e = 0; e < c.KVH * c.HD; ++e) ASSERT_EQ(out[r * P + e], got[r * W + kOff + e]);
  }
}

TEST_P(Rope, BackwardIsTransposeAndMatchesFiniteDifferences) {
  for (const Case& c : kCases) {
    const int W = (c.NH + 2 * c.KVH) * c.HD;
    const size_t n = size_t(c.B) * c.T * W;
    const auto G = randomVec(n, 3);  // dL/d(rotated qkv), L = sum(rope(qkv) * G)
    auto run = [&](Backend& b) {
      DeviceBuffers d(b);
      float* g = d.up(G);
      float* dq = d.poisoned(size_t(c.B) * c.T * c.NH * c.HD);  // out of place, dense
      b.ropeBackward(dq, g, c.B, c.T, c.NH, c.HD, c.NH * c.HD, W, c.theta);
      b.ropeBackward(g + c.NH * c.HD, g + c.NH * c.HD, c.B, c.T, c.KVH, c.HD, W, W, c.theta);
      return std::pair{d.down(dq, size_t(c.B) * c.T * c.NH * c.HD), d.down(g, n)};
    };
    const auto [dq, dg] = run(be());
    const auto Gd = toDouble(G);
    std::vector<double> wq(dq.size()), wg = Gd;
    ropeRef(wq, 0, c.NH * c.HD, Gd, 0, W, c.B, c.T, c.NH, c.HD, c.theta, -1);
    ropeRef(wg, c.NH * c.HD, W, Gd, c.NH * c.HD, W, c.B, c.T, c.KVH, c.HD, c.theta, -1);
    EXPECT_TRUE(allClose(dq, wq, 1e-6, 1e-6)) << c.HD;
    EXPECT_TRUE(allClose(dg, wg, 1e-6, 1e-6)) << c.HD;
    if (c.HD == 16) {  // d/dx sum(rope(x) * G) by central differences (q heads)
      const auto x = toDouble(randomVec(n, 4));
      std::vector<size_t> qIdx;  // the q elements of qkv, in dq's (dense) order
      for (size_t r = 0; r < size_t(c.B) * c.T; ++r)
        for (int e = 0; e < c.NH * c.HD; ++e) qIdx.push_back(r * W + e);
      std::vector<double> o(n);
      const auto fq = finiteDiffAt(x, qIdx, [&](const std::vector<double>& v) {
        ropeRef(o, 0, W, v, 0, W, c.B, c.T, c.NH, c.HD, c.theta, 1);
        double s = 0;
        for (size_t i : qIdx) s += o[i] * Gd[i];
        return s;
      });
      EXPECT_TRUE(allClose(dq, fq, 1e-5, 1e-6)) << "fd " << c.HD;
    }
    if (hasTwin()) {
      const auto [cq, cg] = run(cpu());
      EXPECT_TRUE(allClose(dq, cq, 1e-6, 1e-6)) << "vs cpu " << c.HD;
      EXPECT_TRUE(allClose(dg, cg, 1e-6, 1e-6)) << "vs cpu " << c.HD;
    }
  }
}

// The convention, in closed form: HD = 16, theta = 10000, so inv_freq[i] = 10000^(-i/8);
// inv_freq[2] = 0.1 and at position 5 the angle of pair (2, 10) is exactly 0.5 rad.
TEST_P(Rope, ClosedFormValuesPinTheConvention) {
  const int B = 1, T = 6, NH = 1, HD = 16;
  auto rotateOneHot = [&](int t, int d) {
    std::vector<float> x(size_t(B) * T * NH * HD, 0.0f);
    x[size_t(t) * HD + d] = 1.0f;
    DeviceBuffers buf(be());
    float* out = buf.poisoned(x.size());
    be().ropeForward(out, buf.up(x), B, T, NH, HD, HD, HD, 10000.0f);
    const auto all = buf.down(out, x.size());
    return std::vector<float>(all.begin() + t * HD, all.begin() + (t + 1) * HD);
  };
  auto expectOnly = [](const std::vector<float>& y, std::vector<std::pair<int, double>> nz) {
    std::vector<double> want(y.size(), 0.0);
    for (auto [d, v] : nz) want[d] = v;
    EXPECT_TRUE(allClose(y, want, 1e-6, 1e-7));
  };
  // x1 = e_2 -> (cos a) e_2 + (sin a) e_10: out[i+half] = x2 cos + x1 sin (not GPT-J's e_3).
  expectOnly(rotateOneHot(5, 2), {{2, std::cos(0.5)}, {10, std::sin(0.5)}});
  // x2 = e_10 -> -(sin a) e_2 + (cos a) e_10: out[i] = x1 cos - x2 sin.
  expectOnly(rotateOneHot(5, 10), {{2, -std::sin(0.5)}, {10, std::cos(0.5)}});
  // Pair 0 has inv_freq 1: angle = position.
  expectOnly(rotateOneHot(3, 0), {{0, std::cos(3.0)}, {8, std::sin(3.0)}});
  // Pair 7 (the slowest): inv_freq = 10000^(-7/8).
  const double a7 = 4 * std::pow(10000.0, -7.0 / 8.0);
  expectOnly(rotateOneHot(4, 15), {{7, -std::sin(a7)}, {15, std::cos(a7)}});

  // Position 0 is the identity, bit for bit, and backward undoes forward.
  const auto x = randomVec(size_t(2) * T * 3 * HD, 5);
  DeviceBuffers buf(be());
  float* y = buf.poisoned(x.size());
  float* back = buf.poisoned(x.size());
  be().ropeForward(y, buf.up(x), 2, T, 3, HD, 3 * HD, 3 * HD, 10000.0f);
  be().ropeBackward(back, y, 2, T, 3, HD, 3 * HD, 3 * HD, 10000.0f);
  const auto got = buf.down(y, x.size()), undone = buf.down(back, x.size());
  for (int b = 0; b < 2; ++b)
    for (int e = 0; e < 3 * HD; ++e)
      ASSERT_EQ(got[size_t(b) * T * 3 * HD + e], x[size_t(b) * T * 3 * HD + e]) << b << " " << e;
  EXPECT_TRUE(allClose(undone, x, 1e-6, 1e-6));
}

TEST_P(Rope, OddHeadDimThrows) {
  DeviceBuffers d(be());
  float* x = d.poisoned(15);
  EXPECT_THROW(be().ropeForward(x, x, 1, 1, 1, 15, 15, 15, 10000.0f), std::invalid_argument);
}

TS_ON_BACKEND(Rope);
