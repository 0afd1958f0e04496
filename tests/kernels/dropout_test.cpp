// The Dropout op (counter-based mask, DropoutMask.h) and the frozen-gradient paths of the norm
// and embedding backwards, on every instantiated backend (OnBackend.h); CUDA also bitwise
// against the CPU twin (the mask is integer arithmetic).
#include <gtest/gtest.h>

#include <cmath>

#include "OnBackend.h"
#include "TestUtil.h"

using namespace ts::kernels;
using namespace ts::kernels::test;

namespace {
class Dropout : public OnBackend {};
class FrozenGrads : public OnBackend {};

std::vector<float> runDropout(Backend& b, const std::vector<float>& x, float p, uint64_t seed,
                              uint64_t key, bool inPlace = false) {
  DeviceBuffers d(b);
  float* in = d.up(x);
  float* out = inPlace ? in : d.poisoned(x.size());
  b.dropout(out, in, int64_t(x.size()), p, seed, key);
  return d.down(out, x.size());
}
}  // namespace

// Every output is 0 or exactly x * (1 / (1 - p)); the kept fraction is 1 - p within 5 sigma
// (binomial); nothing is left unwritten; p = 0 is the identity.
TEST_P(Dropout, KeepsOneMinusPScaledAndZeroesTheRest) {
  for (float p : {0.1f, 0.3f, 0.5f, 0.9f}) {
    const size_t n = 100003;
    auto x = randomVec(n, 7, 0.5f, 2.0f);  // never 0: a zero output means dropped
    const auto out = runDropout(be(), x, p, 42, 1);
    const float s = 1.f / (1.f - p);
    size_t kept = 0;
    for (size_t i = 0; i < n; ++i) {
      ASSERT_TRUE(out[i] == 0.f || out[i] == x[i] * s) << "p " << p << " [" << i << "] " << out[i];
      kept += out[i] != 0.f;
    }
    const double q = 1.0 - p, sigma = std::sqrt(p * q / double(n));
    EXPECT_NEAR(double(kept) / double(n), q, 5 * sigma) << "p " << p;
    if (hasTwin()) EXPECT_EQ(out, runDropout(cpu(), x, p, 42, 1)) << "vs cpu, p " << p;
  }
  const auto x = randomVec(257, 3);
  EXPECT_EQ(runDropout(be(), x, 0.f, 1, 1), x);
}

// The mask is a pure function of (seed, key, element): the same call gives the same mask, in
// place or not; another key or seed another mask; masks of consecutive keys are independent
// (about (1-p)^2 of the elements kept by both).
TEST_P(Dropout, MaskIsAPureFunctionOfSeedKeyAndElement) {
  const size_t n = 50000;
  const auto x = randomVec(n, 9, 0.5f, 2.0f);
  const float p = 0.4f;
  const auto a = runDropout(be(), x, p, 5, 10);
  EXPECT_EQ(runDropout(be(), x, p, 5, 10), a);
  EXPECT_EQ(runDropout(be(), x, p, 5, 10, true), a);
  for (auto [seed, key] : {std::pair<uint64_t, uint64_t>{5, 11}, {6, 10}}) {
    const auto b = runDropout(be(), x, p, seed, key);
    size_t both = 0;
    for (size_t i = 0; i < n; ++i) both += a[i] != 0.f && b[i] != 0.f;
    const double expect = (1 - p) * (1 - p);
    EXPECT_NEAR(double(both) / n, expect, 0.02) << "seed " << seed << " key " << key;
  }
  // The mask of a prefix is the prefix of the mask (element indices, not thread layout).
  const std::vector<float> head(x.begin(), x.begin() + 1000);
  const auto ah = runDropout(be(), head, p, 5, 10);
  EXPECT_TRUE(std::equal(ah.begin(), ah.end(), a.begin()));
}

// Backward is the same op on the output gradient: <dropout(x), g> == <x, dropout(g)>.
TEST_P(Dropout, IsItsOwnAdjoint) {
  const size_t n = 4099;
  const auto x = randomVec(n, 1), g = randomVec(n, 2);
  const auto dx = runDropout(be(), x, 0.25f, 3, 4), dg = runDropout(be(), g, 0.25f, 3, 4);
  double l = 0, r = 0;
  for (size_t i = 0; i < n; ++i) {
    l += double(dx[i]) * g[i];
    r += double(x[i]) * dg[i];
  }
  EXPECT_NEAR(l, r, 1e-9 * n);
}

// A null weight (or bias, or token table) gradient means frozen: the input gradient and the
// other gradients are exactly those of the call that computes everything.
TEST_P(FrozenGrads, NormAndEmbeddingBackwardsSkipNullGradients) {
  const int N = 37, C = 19;
  const auto x = randomVec(size_t(N) * C, 1), w = randomVec(C, 2), bias = randomVec(C, 3);
  const auto dout = randomVec(size_t(N) * C, 4);
  auto ln = [&](bool dw, bool db) {
    DeviceBuffers d(be());
    float* mean = d.poisoned(N);
    float* rstd = d.poisoned(N);
    float* y = d.poisoned(size_t(N) * C);
    be().layernormForward(y, mean, rstd, d.up(x), d.up(w), d.up(bias), N, C, 1e-5f);
    float* dinp = d.up(std::vector<float>(size_t(N) * C, 0.f));
    float* gw = d.up(std::vector<float>(C, 0.f));
    float* gb = d.up(std::vector<float>(C, 0.f));
    be().layernormBackward(dinp, dw ? gw : nullptr, db ? gb : nullptr, d.up(dout), d.up(x), d.up(w),
                           mean, rstd, N, C);
    return std::vector<std::vector<float>>{d.down(dinp, size_t(N) * C), d.down(gw, C),
                                           d.down(gb, C)};
  };
  const auto all = ln(true, true);
  const auto noW = ln(false, true), none = ln(false, false);
  EXPECT_EQ(noW[0], all[0]);
  EXPECT_EQ(noW[2], all[2]);
  EXPECT_EQ(noW[1], std::vector<float>(C, 0.f));
  EXPECT_EQ(none[0], all[0]);
  EXPECT_EQ(none[2], std::vector<float>(C, 0.f));
  auto rms = [&](bool dw) {
    DeviceBuffers d(be());
    float* rstd = d.poisoned(N);
    float* y = d.poisoned(size_t(N) * C);
    be().rmsnormForward(y, rstd, d.up(x), d.up(w), N, C, 1e-5f);
    float* dinp = d.up(std::vector<float>(size_t(N) * C, 0.f));
    float* gw = d.up(std::vector<float>(C, 0.f));
    be().rmsnormBackward(dinp, dw ? gw : nullptr, d.up(dout), d.up(x), d.up(w), rstd, N, C);
    return std::pair{d.down(dinp, size_t(N) * C), d.down(gw, C)};
  };
  EXPECT_EQ(rms(false).first, rms(true).first);
  EXPECT_EQ(rms(false).second, std::vector<float>(C, 0.f));
  const int B = 3, T = 5, V = 11;
  std::vector<int32_t> tok(size_t(B) * T);
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = int32_t((i * 7 + 2) % V);
  const auto g = randomVec(size_t(B) * T * C, 5);
  auto emb = [&](bool dwte) {
    DeviceBuffers d(be());
    float* gte = d.up(std::vector<float>(size_t(V) * C, 0.f));
    float* gpe = d.up(std::vector<float>(size_t(T) * C, 0.f));
    be().embeddingBackward(dwte ? gte : nullptr, gpe, d.up(g), d.up(tok), B, T, C);
    return std::pair{d.down(gte, size_t(V) * C), d.down(gpe, size_t(T) * C)};
  };
  const auto e = emb(true), f = emb(false);
  EXPECT_EQ(f.second, e.second);
  EXPECT_EQ(f.first, std::vector<float>(size_t(V) * C, 0.f));
  EXPECT_NE(e.first, f.first);
}

TS_ON_BACKEND(Dropout);
TS_ON_BACKEND(FrozenGrads);
