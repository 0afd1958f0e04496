// Grouped-query causal attention (naive and flash) vs an fp64 reference: forward (out, att,
// lse) and backward (dqkv, with dk/dv summed over each kv head's query heads), the backward
// also against central finite differences of a random projection of the fp64 forward; KVH ==
// NH is the multi-head op bit for bit. Head dims 16, 64, 128; T = 37 and T = 67 / 130 across
// the CPU's 64-row tiles. Runs on every instantiated backend (OnBackend.h), CUDA also against
// the CPU twin. Every output (and the datt scratch) starts as NaN bytes: all are written (=).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <stdexcept>

#include "OnBackend.h"
#include "TestUtil.h"

using namespace ts::kernels;
using namespace ts::kernels::test;

namespace {
struct Gqa {
  int B, T, NH, KVH, HD;
  int C() const { return NH * HD; }
  int W() const { return (NH + 2 * KVH) * HD; }  // qkv row: q heads | k heads | v heads
  size_t nQkv() const { return size_t(B) * T * W(); }
  size_t nOut() const { return size_t(B) * T * C(); }
  size_t nAtt() const { return size_t(B) * NH * T * T; }
  size_t nLse() const { return size_t(B) * NH * T; }
  size_t q(int b, int t, int h) const { return (size_t(b) * T + t) * W() + size_t(h) * HD; }
  size_t k(int b, int t, int g) const { return q(b, t, NH + g); }
  size_t v(int b, int t, int g) const { return q(b, t, NH + KVH + g); }
  int kvOf(int h) const { return h / (NH / KVH); }
};

std::ostream& operator<<(std::ostream& os, const Gqa& g) {
  return os << "B" << g.B << " T" << g.T << " NH" << g.NH << " KVH" << g.KVH << " HD" << g.HD;
}

// Softmax probabilities of query row i of head h (j <= i), fp64; returns lse.
double probs(const std::vector<double>& x, const Gqa& g, int b, int h, int i, double* p) {
  const double sc = 1.0 / std::sqrt(double(g.HD));
  double mx = -1e300;
  for (int j = 0; j <= i; ++j) {
    double d = 0;
    for (int e = 0; e < g.HD; ++e) d += x[g.q(b, i, h) + e] * x[g.k(b, j, g.kvOf(h)) + e];
    p[j] = d * sc;
    mx = std::max(mx, p[j]);
  }
  double sum = 0;
  for (int j = 0; j <= i; ++j) sum += std::exp(p[j] - mx);
  for (int j = 0; j <= i; ++j) p[j] = std::exp(p[j] - mx) / sum;
  return mx + std::log(sum);
}

void gqaRef(const std::vector<double>& x, const Gqa& g, std::vector<double>& out,
            std::vector<double>* att = nullptr, std::vector<double>* lse = nullptr) {
  out.assign(g.nOut(), 0.0);
  if (att) att->assign(g.nAtt(), 0.0);
  if (lse) lse->assign(g.nLse(), 0.0);
  std::vector<double> p(g.T);
  for (int b = 0; b < g.B; ++b)
    for (int h = 0; h < g.NH; ++h)
      for (int i = 0; i < g.T; ++i) {
        const double l = probs(x, g, b, h, i, p.data());
        if (lse) (*lse)[(size_t(b) * g.NH + h) * g.T + i] = l;
        for (int j = 0; j <= i; ++j) {
          if (att) (*att)[((size_t(b) * g.NH + h) * g.T + i) * g.T + j] = p[j];
          for (int e = 0; e < g.HD; ++e)
            out[(size_t(b) * g.T + i) * g.C() + h * g.HD + e] += p[j] * x[g.v(b, j, g.kvOf(h)) + e];
        }
      }
}

// d/dqkv of sum(out * G), fp64: dS = P (dP - rowsum(P dP)) scale with dP = dO V^T.
void gqaGradRef(const std::vector<double>& x, const std::vector<double>& G, const Gqa& g,
                std::vector<double>& dx) {
  const double sc = 1.0 / std::sqrt(double(g.HD));
  dx.assign(g.nQkv(), 0.0);
  std::vector<double> p(g.T), dp(g.T);
  for (int b = 0; b < g.B; ++b)
    for (int h = 0; h < g.NH; ++h) {
      const int kv = g.kvOf(h);
      for (int i = 0; i < g.T; ++i) {
        probs(x, g, b, h, i, p.data());
        const double* go = &G[(size_t(b) * g.T + i) * g.C() + h * g.HD];
        double D = 0;
        for (int j = 0; j <= i; ++j) {
          dp[j] = 0;
          for (int e = 0; e < g.HD; ++e) dp[j] += go[e] * x[g.v(b, j, kv) + e];
          D += p[j] * dp[j];
        }
        for (int j = 0; j <= i; ++j) {
          const double ds = p[j] * (dp[j] - D) * sc;
          for (int e = 0; e < g.HD; ++e) {
            dx[g.q(b, i, h) + e] += ds * x[g.k(b, j, kv) + e];
            dx[g.k(b, j, kv) + e] += ds * x[g.q(b, i, h) + e];
            dx[g.v(b, j, kv) + e] += p[j] * go[e];
          }
        }
      }
    }
}

const Gqa kCases[] = {{2, 37, 4, 2, 16}, {1, 37, 6, 3, 64},  {1, 37, 4, 4, 128}, {2, 37, 6, 3, 16},
                      {1, 67, 4, 1, 64}, {1, 130, 4, 2, 16}, {1, 37, 6, 2, 128}};

struct Results {
  std::vector<float> out, att, dqkv, flashOut, lse, flashDqkv;
};

// Naive and flash, forward and backward, on one backend; every output starts poisoned.
Results runAll(Backend& be, const Gqa& g, const std::vector<float>& qkv,
               const std::vector<float>& G) {
  DeviceBuffers d(be);
  const float *x = d.up(qkv), *dO = d.up(G);
  float *out = d.poisoned(g.nOut()), *att = d.poisoned(g.nAtt()), *datt = d.poisoned(g.nAtt());
  float* dx = d.poisoned(g.nQkv());
  be.attentionGqaForward(out, att, x, g.B, g.T, g.C(), g.NH, g.KVH);
  be.attentionGqaBackward(dx, datt, dO, x, att, g.B, g.T, g.C(), g.NH, g.KVH);
  float *fo = d.poisoned(g.nOut()), *lse = d.poisoned(g.nLse()), *fdx = d.poisoned(g.nQkv());
  be.flashAttentionGqaForward(fo, lse, x, g.B, g.T, g.C(), g.NH, g.KVH);
  be.flashAttentionGqaBackward(fdx, dO, fo, lse, x, g.B, g.T, g.C(), g.NH, g.KVH);
  return {d.down(out, g.nOut()), d.down(att, g.nAtt()), d.down(dx, g.nQkv()),
          d.down(fo, g.nOut()),  d.down(lse, g.nLse()), d.down(fdx, g.nQkv())};
}

class GqaAttention : public OnBackend {};
}  // namespace

TEST_P(GqaAttention, ForwardAndBackwardMatchFp64) {
  for (const Gqa& g : kCases) {
    const auto qkv = randomVec(g.nQkv(), 1, -2.0f, 2.0f);
    const auto G = randomVec(g.nOut(), 2);
    const Results r = runAll(be(), g, qkv, G);
    const auto xd = toDouble(qkv);
    std::vector<double> wo, wa, wl, wd;
    gqaRef(xd, g, wo, &wa, &wl);
    gqaGradRef(xd, toDouble(G), g, wd);
    EXPECT_TRUE(allClose(r.out, wo, 1e-4, 1e-5)) << g;
    EXPECT_TRUE(allClose(r.att, wa, 1e-4, 1e-6)) << g;  // incl. zeros above the diagonal
    EXPECT_TRUE(allClose(r.dqkv, wd, 1e-3, 1e-4)) << g;
    EXPECT_TRUE(allClose(r.flashOut, wo, 1e-4, 1e-5)) << g;
    EXPECT_TRUE(allClose(r.lse, wl, 1e-5, 1e-5)) << g;
    EXPECT_TRUE(allClose(r.flashDqkv, wd, 1e-3, 1e-4)) << g;
    if (hasTwin()) {
      const Results c = runAll(cpu(), g, qkv, G);
      EXPECT_TRUE(allClose(r.out, c.out, 1e-4, 1e-5)) << "vs cpu " << g;
      EXPECT_TRUE(allClose(r.att, c.att, 1e-4, 1e-6)) << "vs cpu " << g;
      EXPECT_TRUE(allClose(r.dqkv, c.dqkv, 1e-3, 1e-4)) << "vs cpu " << g;
      EXPECT_TRUE(allClose(r.flashOut, c.flashOut, 1e-4, 1e-5)) << "vs cpu " << g;
      EXPECT_TRUE(allClose(r.lse, c.lse, 1e-5, 1e-5)) << "vs cpu " << g;
      EXPECT_TRUE(allClose(r.flashDqkv, c.flashDqkv, 1e-3, 1e-4)) << "vs cpu " << g;
    }
  }
}

// The fp64 gradient itself and both backward ops against central differences of
// sum(out * G), at all elements of four rows (first, second, one tile edge, last) plus
// random ones: differencing every element would cost minutes.
TEST_P(GqaAttention, BackwardMatchesFiniteDifferences) {
  for (const Gqa& g : {Gqa{1, 67, 4, 2, 16}, Gqa{2, 37, 6, 3, 16}, Gqa{1, 37, 4, 4, 16}}) {
    const auto qkv = randomVec(g.nQkv(), 3, -1.5f, 1.5f);
    const auto G = randomVec(g.nOut(), 4);
    const Results r = runAll(be(), g, qkv, G);
    std::vector<size_t> idx;
    for (int b = 0; b < g.B; ++b)
      for (int t : {0, 1, std::min(g.T - 1, 64), g.T - 1})
        for (int e = 0; e < g.W(); ++e) idx.push_back(g.q(b, t, 0) + e);
    std::mt19937 rng(5);
    for (int k = 0; k < 300; ++k) idx.push_back(rng() % g.nQkv());
    const auto xd = toDouble(qkv), Gd = toDouble(G);
    std::vector<double> o;
    const auto fd = finiteDiffAt(xd, idx, [&](const std::vector<double>& v) {
      gqaRef(v, g, o);
      return dot(o, Gd);
    });
    std::vector<double> ref;
    gqaGradRef(xd, Gd, g, ref);
    std::vector<float> naive, flash;
    std::vector<double> refAt;
    for (size_t i : idx) {
      naive.push_back(r.dqkv[i]);
      flash.push_back(r.flashDqkv[i]);
      refAt.push_back(ref[i]);
    }
    EXPECT_TRUE(allClose(std::vector<float>(refAt.begin(), refAt.end()), fd, 1e-5, 1e-6)) << g;
    EXPECT_TRUE(allClose(naive, fd, 1e-3, 1e-4)) << g;
    EXPECT_TRUE(allClose(flash, fd, 1e-3, 1e-4)) << g;
  }
}

TEST_P(GqaAttention, KvHeadsEqualHeadsIsMultiHeadBitwise) {
  for (const Gqa& g : {Gqa{2, 37, 4, 4, 16}, Gqa{1, 67, 3, 3, 64}, Gqa{1, 37, 2, 2, 128}}) {
    const auto qkv = randomVec(g.nQkv(), 6, -2.0f, 2.0f);
    const auto G = randomVec(g.nOut(), 7);
    const Results gqa = runAll(be(), g, qkv, G);
    DeviceBuffers d(be());
    const float *x = d.up(qkv), *dO = d.up(G);
    float *out = d.poisoned(g.nOut()), *att = d.poisoned(g.nAtt()), *datt = d.poisoned(g.nAtt());
    float* dx = d.poisoned(g.nQkv());
    be().attentionForward(out, att, x, g.B, g.T, g.C(), g.NH);
    be().attentionBackward(dx, datt, dO, x, att, g.B, g.T, g.C(), g.NH);
    float *fo = d.poisoned(g.nOut()), *lse = d.poisoned(g.nLse()), *fdx = d.poisoned(g.nQkv());
    be().flashAttentionForward(fo, lse, x, g.B, g.T, g.C(), g.NH);
    be().flashAttentionBackward(fdx, dO, fo, lse, x, g.B, g.T, g.C(), g.NH);
    auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
    };
    EXPECT_TRUE(same(gqa.out, d.down(out, g.nOut()))) << g;
    EXPECT_TRUE(same(gqa.att, d.down(att, g.nAtt()))) << g;
    EXPECT_TRUE(same(gqa.dqkv, d.down(dx, g.nQkv()))) << g;
    EXPECT_TRUE(same(gqa.flashOut, d.down(fo, g.nOut()))) << g;
    EXPECT_TRUE(same(gqa.lse, d.down(lse, g.nLse()))) << g;
    EXPECT_TRUE(same(gqa.flashDqkv, d.down(fdx, g.nQkv()))) << g;
  }
}

TEST_P(GqaAttention, UnevenGroupsThrow) {
  const Gqa g{1, 5, 4, 3, 8};  // 4 query heads cannot share 3 kv heads evenly
  DeviceBuffers d(be());
  float* x = d.poisoned(g.nQkv());
  float *out = d.poisoned(g.nOut()), *att = d.poisoned(g.nAtt()), *lse = d.poisoned(g.nLse());
  EXPECT_THROW(be().attentionGqaForward(out, att, x, g.B, g.T, g.C(), g.NH, g.KVH),
               std::invalid_argument);
  EXPECT_THROW(be().attentionGqaBackward(x, att, out, x, att, g.B, g.T, g.C(), g.NH, g.KVH),
               std::invalid_argument);
  EXPECT_THROW(be().flashAttentionGqaForward(out, lse, x, g.B, g.T, g.C(), g.NH, g.KVH),
               std::invalid_argument);
  EXPECT_THROW(be().flashAttentionGqaBackward(x, out, out, lse, x, g.B, g.T, g.C(), g.NH, 0),
               std::invalid_argument);
}

TS_ON_BACKEND(GqaAttention);
