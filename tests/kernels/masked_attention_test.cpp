// Masked attention (naive and flash) with AttentionOptions vs an fp64 reference: sliding windows
// smaller than T, of 1 and at least T, tanh soft-capping, a custom scale, GQA (KVH = NH, NH/2
// and 1), head dims that are no fraction of anything (24), odd T across the CPU's 64-row tiles.
// Forward (out, att incl. its zeros, lse) and backward (dqkv) against fp64, the fp64 gradient
// itself against central differences; the default options against the GQA ops (C = NH*HD):
// bitwise. Every output (and the datt scratch) starts as NaN bytes. Runs on every
// instantiated backend (OnBackend.h), CUDA also against the CPU twin.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>

#include "OnBackend.h"
#include "TestUtil.h"

using namespace ts::kernels;
using namespace ts::kernels::test;

namespace {
struct Geo {
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

std::ostream& operator<<(std::ostream& os, const Geo& g) {
  return os << "B" << g.B << " T" << g.T << " NH" << g.NH << " KVH" << g.KVH << " HD" << g.HD;
}
std::string str(const AttentionOptions& o) {
  return " scale " + std::to_string(o.scale) + " window " + std::to_string(o.window) + " softcap " +
         std::to_string(o.softcap);
}

int firstKey(const AttentionOptions& o, int i) {
  return o.window > 0 ? std::max(0, i - o.window + 1) : 0;
}
double scaleOf(const AttentionOptions& o, const Geo& g) {
  return o.scale != 0.0f ? double(o.scale) : 1.0 / std::sqrt(double(g.HD));
}

// The scaled (and capped) score of query i, key j; f = d capped / d scaled.
double score(const std::vector<double>& x, const Geo& g, const AttentionOptions& o, int b, int h,
             int i, int j, double* f = nullptr) {
  double d = 0;
  for (int e = 0; e < g.HD; ++e) d += x[g.q(b, i, h) + e] * x[g.k(b, j, g.kvOf(h)) + e];
  d *= scaleOf(o, g);
  if (f) *f = 1;
  if (o.softcap > 0) {
    const double t = std::tanh(d / o.softcap);
    if (f) *f = 1 - t * t;
    d = o.softcap * t;
  }
  return d;
}

// Softmax probabilities of query row i of head h over its visible keys, 0 elsewhere; lse.
double probs(const std::vector<double>& x, const Geo& g, const AttentionOptions& o, int b, int h,
             int i, double* p, double* f = nullptr) {
  double mx = -1e300;
  const int j0 = firstKey(o, i);
  for (int j = 0; j < g.T; ++j) p[j] = 0;
  for (int j = j0; j <= i; ++j) {
    p[j] = score(x, g, o, b, h, i, j, f ? f + j : nullptr);
    mx = std::max(mx, p[j]);
  }
  double sum = 0;
  for (int j = j0; j <= i; ++j) sum += std::exp(p[j] - mx);
  for (int j = j0; j <= i; ++j) p[j] = std::exp(p[j] - mx) / sum;
  return mx + std::log(sum);
}

void attRef(const std::vector<double>& x, const Geo& g, const AttentionOptions& o,
            std::vector<double>& out, std::vector<double>* att = nullptr,
            std::vector<double>* lse = nullptr) {
  out.assign(g.nOut(), 0.0);
  if (att) att->assign(g.nAtt(), 0.0);
  if (lse) lse->assign(g.nLse(), 0.0);
  std::vector<double> p(g.T);
  for (int b = 0; b < g.B; ++b)
    for (int h = 0; h < g.NH; ++h)
      for (int i = 0; i < g.T; ++i) {
        const double l = probs(x, g, o, b, h, i, p.data());
        if (lse) (*lse)[(size_t(b) * g.NH + h) * g.T + i] = l;
        for (int j = 0; j <= i; ++j) {
          if (att) (*att)[((size_t(b) * g.NH + h) * g.T + i) * g.T + j] = p[j];
          for (int e = 0; e < g.HD; ++e)
            out[(size_t(b) * g.T + i) * g.C() + h * g.HD + e] += p[j] * x[g.v(b, j, g.kvOf(h)) + e];
        }
      }
}

// d/dqkv of sum(out * G), fp64: dS = P (dP - rowsum(P dP)) f scale with dP = dO V^T.
void attGradRef(const std::vector<double>& x, const std::vector<double>& G, const Geo& g,
                const AttentionOptions& o, std::vector<double>& dx) {
  const double sc = scaleOf(o, g);
  dx.assign(g.nQkv(), 0.0);
  std::vector<double> p(g.T), dp(g.T), f(g.T);
  for (int b = 0; b < g.B; ++b)
    for (int h = 0; h < g.NH; ++h) {
      const int kv = g.kvOf(h);
      for (int i = 0; i < g.T; ++i) {
        probs(x, g, o, b, h, i, p.data(), f.data());
        const double* go = &G[(size_t(b) * g.T + i) * g.C() + h * g.HD];
        double D = 0;
        for (int j = firstKey(o, i); j <= i; ++j) {
          dp[j] = 0;
          for (int e = 0; e < g.HD; ++e) dp[j] += go[e] * x[g.v(b, j, kv) + e];
          D += p[j] * dp[j];
        }
        for (int j = firstKey(o, i); j <= i; ++j) {
          const double ds = p[j] * (dp[j] - D) * f[j] * sc;
          for (int e = 0; e < g.HD; ++e) {
            dx[g.q(b, i, h) + e] += ds * x[g.k(b, j, kv) + e];
            dx[g.k(b, j, kv) + e] += ds * x[g.q(b, i, h) + e];
            dx[g.v(b, j, kv) + e] += p[j] * go[e];
          }
        }
      }
    }
}

struct Results {
  std::vector<float> out, att, dqkv, flashOut, lse, flashDqkv;
};

// Naive and flash, forward and backward, on one backend; every output starts poisoned.
Results runAll(Backend& be, const Geo& g, const AttentionOptions& o, const std::vector<float>& qkv,
               const std::vector<float>& G) {
  DeviceBuffers d(be);
  const float *x = d.up(qkv), *dO = d.up(G);
  float *out = d.poisoned(g.nOut()), *att = d.poisoned(g.nAtt()), *datt = d.poisoned(g.nAtt());
  float* dx = d.poisoned(g.nQkv());
  be.attentionMaskedForward(out, att, x, g.B, g.T, g.NH, g.KVH, g.HD, o);
  be.attentionMaskedBackward(dx, datt, dO, x, att, g.B, g.T, g.NH, g.KVH, g.HD, o);
  float *fo = d.poisoned(g.nOut()), *lse = d.poisoned(g.nLse()), *fdx = d.poisoned(g.nQkv());
  be.flashAttentionMaskedForward(fo, lse, x, g.B, g.T, g.NH, g.KVH, g.HD, o);
  be.flashAttentionMaskedBackward(fdx, dO, fo, lse, x, g.B, g.T, g.NH, g.KVH, g.HD, o);
  return {d.down(out, g.nOut()), d.down(att, g.nAtt()), d.down(dx, g.nQkv()),
          d.down(fo, g.nOut()),  d.down(lse, g.nLse()), d.down(fdx, g.nQkv())};
}

AttentionOptions opts(float scale, int window, float softcap) {
  AttentionOptions o;
  o.scale = scale;
  o.window = window;
  o.softcap = softcap;
  return o;
}

struct Case {
  Geo g;
  AttentionOptions o;
};
const Case kCases[] = {
    {{2, 37, 4, 2, 24}, opts(0, 0, 0)},      {{2, 37, 4, 2, 24}, opts(0, 5, 0)},
    {{1, 37, 4, 1, 24}, opts(0, 1, 0)},      {{1, 37, 4, 2, 24}, opts(0, 37, 0)},
    {{1, 37, 4, 4, 24}, opts(0, 500, 0)},    {{2, 37, 4, 2, 24}, opts(0, 0, 2.5f)},
    {{1, 37, 4, 1, 16}, opts(0.4f, 0, 0)},   {{1, 130, 4, 2, 16}, opts(0, 70, 0)},
    {{1, 130, 4, 1, 24}, opts(0.3f, 50, 3)}, {{1, 150, 2, 1, 8}, opts(0, 10, 0)},
    {{1, 67, 4, 2, 64}, opts(0, 20, 4)},
};

class MaskedAttention : public OnBackend {};
}  // namespace

TEST_P(MaskedAttention, ForwardAndBackwardMatchFp64) {
  for (const Case& c : kCases) {
    const Geo& g = c.g;
    const auto qkv = randomVec(g.nQkv(), 1, -2.0f, 2.0f);
    const auto G = randomVec(g.nOut(), 2);
    const Results r = runAll(be(), g, c.o, qkv, G);
    const auto xd = toDouble(qkv);
    std::vector<double> wo, wa, wl, wd;
    attRef(xd, g, c.o, wo, &wa, &wl);
    attGradRef(xd, toDouble(G), g, c.o, wd);
    EXPECT_TRUE(allClose(r.out, wo, 1e-4, 1e-5)) << g << str(c.o);
    EXPECT_TRUE(allClose(r.att, wa, 1e-4, 1e-6)) << g << str(c.o);  // incl. the masked zeros
    EXPECT_TRUE(allClose(r.dqkv, wd, 1e-3, 1e-4)) << g << str(c.o);
    EXPECT_TRUE(allClose(r.flashOut, wo, 1e-4, 1e-5)) << g << str(c.o);
    EXPECT_TRUE(allClose(r.lse, wl, 1e-5, 1e-5)) << g << str(c.o);
    EXPECT_TRUE(allClose(r.flashDqkv, wd, 1e-3, 1e-4)) << g << str(c.o);
    if (hasTwin()) {
      const Results t = runAll(cpu(), g, c.o, qkv, G);
      EXPECT_TRUE(allClose(r.out, t.out, 1e-4, 1e-5)) << "vs cpu " << g << str(c.o);
      EXPECT_TRUE(allClose(r.att, t.att, 1e-4, 1e-6)) << "vs cpu " << g << str(c.o);
      EXPECT_TRUE(allClose(r.dqkv, t.dqkv, 1e-3, 1e-4)) << "vs cpu " << g << str(c.o);
      EXPECT_TRUE(allClose(r.flashOut, t.flashOut, 1e-4, 1e-5)) << "vs cpu " << g << str(c.o);
      EXPECT_TRUE(allClose(r.lse, t.lse, 1e-5, 1e-5)) << "vs cpu " << g << str(c.o);
      EXPECT_TRUE(allClose(r.flashDqkv, t.flashDqkv, 1e-3, 1e-4)) << "vs cpu " << g << str(c.o);
    }
  }
}

// The fp64 gradient (window and soft-capping included) and both backward ops against central
// differences of sum(out * G) at all elements of a few rows plus random ones.
TEST_P(MaskedAttention, BackwardMatchesFiniteDifferences) {
  for (const Case& c :
       {Case{{1, 37, 4, 2, 24}, opts(0.3f, 6, 2)}, Case{{1, 67, 2, 1, 8}, opts(0, 20, 1.5f)}}) {
    const Geo& g = c.g;
    const auto qkv = randomVec(g.nQkv(), 3, -1.5f, 1.5f);
    const auto G = randomVec(g.nOut(), 4);
    const Results r = runAll(be(), g, c.o, qkv, G);
    std::vector<size_t> idx;
    for (int t : {0, 1, std::min(g.T - 1, 64), g.T - 1})
      for (int e = 0; e < g.W(); ++e) idx.push_back(g.q(0, t, 0) + e);
    std::mt19937 rng(5);
    for (int k = 0; k < 300; ++k) idx.push_back(rng() % g.nQkv());
    const auto xd = toDouble(qkv), Gd = toDouble(G);
    std::vector<double> o;
    const auto fd = finiteDiffAt(xd, idx, [&](const std::vector<double>& v) {
      attRef(v, g, c.o, o);
      return dot(o, Gd);
    });
    std::vector<double> ref;
    attGradRef(xd, Gd, g, c.o, ref);
    std::vector<float> naive, flash;
    std::vector<double> refAt;
    for (size_t i : idx) {
      naive.push_back(r.dqkv[i]);
      flash.push_back(r.flashDqkv[i]);
      refAt.push_back(ref[i]);
    }
    EXPECT_TRUE(allClose(std::vector<float>(refAt.begin(), refAt.end()), fd, 1e-5, 1e-6))
        << g << str(c.o);
    EXPECT_TRUE(allClose(naive, fd, 1e-3, 1e-4)) << g << str(c.o);
    EXPECT_TRUE(allClose(flash, fd, 1e-3, 1e-4)) << g << str(c.o);
  }
}

// Default options are the GQA ops with C = NH*HD, bitwise (both twins share one implementation
// per backend).
TEST_P(MaskedAttention, DefaultOptionsEqualGqaOps) {
  for (const Geo& g : {Geo{2, 37, 4, 2, 24}, Geo{1, 130, 4, 1, 16}, Geo{1, 67, 3, 3, 64}}) {
    const auto qkv = randomVec(g.nQkv(), 6, -2.0f, 2.0f);
    const auto G = randomVec(g.nOut(), 7);
    const Results m = runAll(be(), g, AttentionOptions{}, qkv, G);
    DeviceBuffers d(be());
    const float *x = d.up(qkv), *dO = d.up(G);
    float *out = d.poisoned(g.nOut()), *att = d.poisoned(g.nAtt()), *datt = d.poisoned(g.nAtt());
    float* dx = d.poisoned(g.nQkv());
    be().attentionGqaForward(out, att, x, g.B, g.T, g.C(), g.NH, g.KVH);
    be().attentionGqaBackward(dx, datt, dO, x, att, g.B, g.T, g.C(), g.NH, g.KVH);
    float *fo = d.poisoned(g.nOut()), *lse = d.poisoned(g.nLse()), *fdx = d.poisoned(g.nQkv());
    be().flashAttentionGqaForward(fo, lse, x, g.B, g.T, g.C(), g.NH, g.KVH);
    be().flashAttentionGqaBackward(fdx, dO, fo, lse, x, g.B, g.T, g.C(), g.NH, g.KVH);
    const Results q{d.down(out, g.nOut()), d.down(att, g.nAtt()), d.down(dx, g.nQkv()),
                    d.down(fo, g.nOut()),  d.down(lse, g.nLse()), d.down(fdx, g.nQkv())};
    auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
    };
    EXPECT_TRUE(same(m.out, q.out)) << g;
    EXPECT_TRUE(same(m.att, q.att)) << g;
    EXPECT_TRUE(same(m.dqkv, q.dqkv)) << g;
    EXPECT_TRUE(same(m.flashOut, q.flashOut)) << g;
    EXPECT_TRUE(same(m.lse, q.lse)) << g;
    EXPECT_TRUE(same(m.flashDqkv, q.flashDqkv)) << g;
  }
}

TEST_P(MaskedAttention, UnevenGroupsThrow) {
  const Geo g{1, 5, 4, 3, 8};  // 4 query heads cannot share 3 kv heads evenly
  DeviceBuffers d(be());
  float* x = d.poisoned(g.nQkv());
  float *out = d.poisoned(g.nOut()), *att = d.poisoned(g.nAtt()), *lse = d.poisoned(g.nLse());
  const AttentionOptions o;
  EXPECT_THROW(be().attentionMaskedForward(out, att, x, g.B, g.T, g.NH, g.KVH, g.HD, o),
               std::invalid_argument);
  EXPECT_THROW(be().attentionMaskedBackward(x, att, out, x, att, g.B, g.T, g.NH, g.KVH, g.HD, o),
               std::invalid_argument);
  EXPECT_THROW(be().flashAttentionMaskedForward(out, lse, x, g.B, g.T, g.NH, g.KVH, g.HD, o),
               std::invalid_argument);
  EXPECT_THROW(
      be().flashAttentionMaskedBackward(x, out, out, lse, x, g.B, g.T, g.NH, g.KVH, g.HD, o),
      std::invalid_argument);
}

TS_ON_BACKEND(MaskedAttention);
