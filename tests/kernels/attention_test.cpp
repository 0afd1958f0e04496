// Causal attention (naive and flash) vs an fp64 reference; backward vs finite differences of
// the fp64 forward; flash == naive forward and backward for odd T across tile boundaries.
#include <gtest/gtest.h>

#include <cmath>

#include "TestUtil.h"
#include "trainscope/kernels/Backend.h"
#include "trainscope/kernels/Numeric.h"

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

// The probabilities are saved in 16 bits under the mixed policies (and int8 when compressed),
// so backward gets a P whose rows need not sum to 1. In a sharp row (one dominant key, as the
// default preset's addition needs to learn) the dominant score's true gradient is tiny, and
// sum_j P dP taken from the rounded P carries an error of the same size (2^-9 of a P near 1 in
// bf16): the kernel normalizes by sum_j P, which keeps the gradients within the rounding of
// the other terms. Checked against the fp64 gradient of the exact P.
TEST(Attention, NaiveBackwardFromBf16RoundedProbabilitiesStaysAccurate) {
  auto be = makeCpuBackend();
  const Dims d{2, 16, 16, 2};
  const int hs = d.C / d.NH;
  const size_t nq = size_t(d.B) * d.T * 3 * d.C, no = size_t(d.B) * d.T * d.C;
  auto qkv = randomVec(nq, 11, -1.0f, 1.0f);
  for (int r = 0; r < d.B * d.T; ++r)  // large queries: near one-hot rows
    for (int e = 0; e < d.C; ++e) qkv[size_t(r) * 3 * d.C + e] *= 80.0f;
  const auto G = randomVec(no, 12);
  std::vector<float> out(no), att(size_t(d.B) * d.NH * d.T * d.T);
  be->attentionForward(out.data(), att.data(), qkv.data(), d.B, d.T, d.C, d.NH);
  double sharp = 0;  // the rows' largest probability, on average
  for (size_t row = 0; row < att.size() / d.T; ++row) {
    float mx = 0;
    for (int j = 0; j < d.T; ++j) mx = std::max(mx, att[row * d.T + j]);
    sharp += mx / double(att.size() / d.T);
  }
  ASSERT_GT(sharp, 0.85);
  std::vector<float> rounded(att.size());
  for (size_t i = 0; i < att.size(); ++i) rounded[i] = bf16ToFloat(floatToBf16(att[i]));
  auto dqkv = nanVec(nq), datt = nanVec(att.size());
  be->attentionBackward(dqkv.data(), datt.data(), G.data(), qkv.data(), rounded.data(), d.B, d.T,
                        d.C, d.NH);
  // fp64 gradient from the exact probabilities.
  std::vector<double> o, P;
  const auto x = toDouble(qkv);
  attnRef(x, d.B, d.T, d.C, d.NH, o, &P);
  std::vector<double> want(nq, 0.0);
  const double sc = 1.0 / std::sqrt(double(hs));
  for (int b = 0; b < d.B; ++b)
    for (int h = 0; h < d.NH; ++h)
      for (int i = 0; i < d.T; ++i) {
        auto at = [&](int t, int part) {
          return (size_t(b) * d.T + t) * 3 * d.C + part * d.C + h * hs;
        };
        const double* p = &P[((size_t(b) * d.NH + h) * d.T + i) * d.T];
        const float* dO = &G[(size_t(b) * d.T + i) * d.C + h * hs];
        std::vector<double> dP(size_t(i) + 1);
        double D = 0;
        for (int j = 0; j <= i; ++j) {
          for (int e = 0; e < hs; ++e) dP[j] += double(dO[e]) * x[at(j, 2) + e];
          D += p[j] * dP[j];
        }
        for (int j = 0; j <= i; ++j) {
          const double dS = p[j] * (dP[j] - D) * sc;
          for (int e = 0; e < hs; ++e) {
            want[at(i, 0) + e] += dS * x[at(j, 1) + e];
            want[at(j, 1) + e] += dS * x[at(i, 0) + e];
            want[at(j, 2) + e] += p[j] * dO[e];
          }
        }
      }
  // Relative L2 error of dq, dk and dv. dv = P^T dO takes P's rounding directly: that is the
  // floor. dq and dk, through the softmax backward, stay within 1.5x of it (without the
  // normalization they were 4x above it here).
  auto relErr = [&](int part) {
    double err = 0, norm = 0;
    for (int r = 0; r < d.B * d.T; ++r)
      for (int e = 0; e < d.C; ++e) {
        const size_t k = size_t(r) * 3 * d.C + part * d.C + e;
        err += (dqkv[k] - want[k]) * (dqkv[k] - want[k]);
        norm += want[k] * want[k];
      }
    return std::sqrt(err / norm);
  };
  const double floor = relErr(2);
  EXPECT_LT(floor, 2e-3);
  EXPECT_LT(relErr(0), 1.5 * floor) << "dq; dv's error " << floor;
  EXPECT_LT(relErr(1), 1.5 * floor) << "dk; dv's error " << floor;
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
