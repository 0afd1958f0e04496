// Causal attention (naive and flash) vs an fp64 reference; backward vs finite differences of
// the fp64 forward; flash == naive forward and backward for odd T across tile boundaries.
#include <gtest/gtest.h>

#include <cmath>

#include "TestUtil.h"
#include "trainscope/kernels/Backend.h"

using namespace ts::kernels;
using namespace ts::kernels::test;

namespace {
// out (B,T,C), att (B,NH,T,T), lse (B,NH,T) from qkv (B,T,3C), all fp64.
void attnRef(const std::vector<double>& qkv, int B, int T, int C, int NH, std::vector<double>& out,
             std::vector<double>* att = nullptr, std::vector<double>* lse = nullptr) {
  const int hs = C / NH;
  const double sc = 1.0 / std::sqrt(double(hs));
  out.assign(size_t(B) * T * C, 0.0);
  if (att) att->assign(size_t(B) * NH * T * T, 0.0);
  if (lse) lse->assign(size_t(B) * NH * T, 0.0);
  std::vector<double> s(T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < T; ++i) {
        const double* q = &qkv[(size_t(b) * T + i) * 3 * C + h * hs];
        double mx = -1e300;
        for (int j = 0; j <= i; ++j) {
          const double* k = &qkv[(size_t(b) * T + j) * 3 * C + C + h * hs];
          double d = 0;
          for (int e = 0; e < hs; ++e) d += q[e] * k[e];
          s[j] = d * sc;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int j = 0; j <= i; ++j) sum += std::exp(s[j] - mx);
        for (int j = 0; j <= i; ++j) {
          const double p = std::exp(s[j] - mx) / sum;
          if (att) (*att)[((size_t(b) * NH + h) * T + i) * T + j] = p;
          const double* v = &qkv[(size_t(b) * T + j) * 3 * C + 2 * C + h * hs];
          for (int e = 0; e < hs; ++e) out[(size_t(b) * T + i) * C + h * hs + e] += p * v[e];
        }
        if (lse) (*lse)[(size_t(b) * NH + h) * T + i] = mx + std::log(sum);
      }
}

struct Dims {
  int B, T, C, NH;
};
}  // namespace

TEST(Attention, NaiveForwardMatchesFp64) {
  auto be = makeCpuBackend();
  for (Dims d : {Dims{2, 13, 12, 3}, Dims{1, 1, 8, 2}, Dims{3, 97, 48, 3}, Dims{1, 130, 64, 1}}) {
    const auto qkv = randomVec(size_t(d.B) * d.T * 3 * d.C, 1, -2.0f, 2.0f);
    auto out = nanVec(size_t(d.B) * d.T * d.C), att = nanVec(size_t(d.B) * d.NH * d.T * d.T);
    be->attentionForward(out.data(), att.data(), qkv.data(), d.B, d.T, d.C, d.NH);
    std::vector<double> wo, wa;
    attnRef(toDouble(qkv), d.B, d.T, d.C, d.NH, wo, &wa);
    EXPECT_TRUE(allClose(out, wo, 1e-4, 1e-5)) << d.T;
    EXPECT_TRUE(allClose(att, wa, 1e-4, 1e-6)) << d.T;  // incl. zeros above the diagonal
  }
}

TEST(Attention, NaiveBackwardMatchesFiniteDifferences) {
  auto be = makeCpuBackend();
  const Dims d{2, 13, 12, 3};
  const size_t nq = size_t(d.B) * d.T * 3 * d.C, no = size_t(d.B) * d.T * d.C;
  const auto qkv = randomVec(nq, 2, -1.5f, 1.5f);
  const auto G = randomVec(no, 3);
  std::vector<float> out(no), att(size_t(d.B) * d.NH * d.T * d.T);
  be->attentionForward(out.data(), att.data(), qkv.data(), d.B, d.T, d.C, d.NH);
  auto dqkv = nanVec(nq), datt = nanVec(att.size());
  be->attentionBackward(dqkv.data(), datt.data(), G.data(), qkv.data(), att.data(), d.B, d.T, d.C,
                        d.NH);
  const auto Gd = toDouble(G);
  std::vector<double> o;
  const auto want = finiteDiff(toDouble(qkv), [&](const std::vector<double>& v) {
    attnRef(v, d.B, d.T, d.C, d.NH, o);
    return dot(o, Gd);
  });
  EXPECT_TRUE(allClose(dqkv, want, 1e-3, 1e-4));
}

TEST(FlashAttention, ForwardMatchesFp64AndLse) {
  auto be = makeCpuBackend();
  for (Dims d : {Dims{2, 13, 12, 3}, Dims{1, 1, 8, 2}, Dims{2, 97, 48, 3}, Dims{1, 130, 64, 1},
                 Dims{1, 37, 80, 5}}) {
    const auto qkv = randomVec(size_t(d.B) * d.T * 3 * d.C, 4, -2.0f, 2.0f);
    auto out = nanVec(size_t(d.B) * d.T * d.C), lse = nanVec(size_t(d.B) * d.NH * d.T);
    be->flashAttentionForward(out.data(), lse.data(), qkv.data(), d.B, d.T, d.C, d.NH);
    std::vector<double> wo, wl;
    attnRef(toDouble(qkv), d.B, d.T, d.C, d.NH, wo, nullptr, &wl);
    EXPECT_TRUE(allClose(out, wo, 1e-4, 1e-5)) << d.T;
    EXPECT_TRUE(allClose(lse, wl, 1e-5, 1e-5)) << d.T;
  }
}

TEST(FlashAttention, EqualsNaiveForwardAndBackwardOddT) {
  auto be = makeCpuBackend();
  for (Dims d : {Dims{2, 61, 24, 2}, Dims{1, 97, 48, 3}, Dims{3, 131, 64, 2}}) {
    const size_t nq = size_t(d.B) * d.T * 3 * d.C, no = size_t(d.B) * d.T * d.C;
    const size_t na = size_t(d.B) * d.NH * d.T * d.T;
    const auto qkv = randomVec(nq, 5, -2.0f, 2.0f);
    const auto G = randomVec(no, 6);
    std::vector<float> outN(no), att(na), datt(na), dN(nq);
    be->attentionForward(outN.data(), att.data(), qkv.data(), d.B, d.T, d.C, d.NH);
    be->attentionBackward(dN.data(), datt.data(), G.data(), qkv.data(), att.data(), d.B, d.T, d.C,
                          d.NH);
    auto outF = nanVec(no), lse = nanVec(size_t(d.B) * d.NH * d.T), dF = nanVec(nq);
    be->flashAttentionForward(outF.data(), lse.data(), qkv.data(), d.B, d.T, d.C, d.NH);
    be->flashAttentionBackward(dF.data(), G.data(), outF.data(), lse.data(), qkv.data(), d.B, d.T,
                               d.C, d.NH);
    EXPECT_TRUE(allClose(outF, outN, 1e-4, 1e-5)) << d.T;
    EXPECT_TRUE(allClose(dF, dN, 1e-3, 1e-4)) << d.T;
  }
}

TEST(FlashAttention, BackwardMatchesFiniteDifferences) {
  auto be = makeCpuBackend();
  const Dims d{1, 67, 8, 2};  // crosses the 64-row/64-key tile boundary
  const size_t nq = size_t(d.B) * d.T * 3 * d.C, no = size_t(d.B) * d.T * d.C;
  const auto qkv = randomVec(nq, 7, -1.5f, 1.5f);
  const auto G = randomVec(no, 8);
  std::vector<float> out(no), lse(size_t(d.B) * d.NH * d.T);
  be->flashAttentionForward(out.data(), lse.data(), qkv.data(), d.B, d.T, d.C, d.NH);
  auto dqkv = nanVec(nq);
  be->flashAttentionBackward(dqkv.data(), G.data(), out.data(), lse.data(), qkv.data(), d.B, d.T,
                             d.C, d.NH);
  const auto Gd = toDouble(G);
  std::vector<double> o;
  const auto want = finiteDiff(toDouble(qkv), [&](const std::vector<double>& v) {
    attnRef(v, d.B, d.T, d.C, d.NH, o);
    return dot(o, Gd);
  });
  EXPECT_TRUE(allClose(dqkv, want, 1e-3, 1e-4));
}
