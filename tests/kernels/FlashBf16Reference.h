#pragma once
// fp64 reference of the bf16 flash attention (OpList.h: FlashAttentionBf16) for the tests of
// its CPU twin, its CUDA twin and the CUDA kernels under emulation: with `rounded`, the rounding
// contract (bf16 q, k, v, dout; bf16 probabilities and dS before they multiply; everything else
// exact); without, exact causal attention of the fp32 inputs.
#include <algorithm>
#include <cmath>
#include <ostream>
#include <vector>

#include "trainscope/kernels/Numeric.h"

namespace ts::kernels::test {

struct FlashShape {
  int B, T, NH, KVH, HD;
  int C() const { return NH * HD; }
  int W() const { return (NH + 2 * KVH) * HD; }  // qkv row: q heads | k heads | v heads
  size_t nQkv() const { return size_t(B) * T * W(); }
  size_t nOut() const { return size_t(B) * T * C(); }
  size_t nLse() const { return size_t(B) * NH * T; }
  size_t q(int b, int t, int h) const { return (size_t(b) * T + t) * W() + size_t(h) * HD; }
  size_t k(int b, int t, int g) const { return q(b, t, NH + g); }
  size_t v(int b, int t, int g) const { return q(b, t, NH + KVH + g); }
  // The q (0), k (1) or v (2) columns of a (B, T, W) tensor, row after row.
  template <class T_>
  std::vector<T_> part(const std::vector<T_>& x, int which) const {
    const int lo = which == 0 ? 0 : which == 1 ? NH * HD : (NH + KVH) * HD;
    const int n = which == 0 ? NH * HD : KVH * HD;
    std::vector<T_> r;
    for (size_t row = 0; row < size_t(B) * T; ++row)
      r.insert(r.end(), x.begin() + long(row * W() + lo), x.begin() + long(row * W() + lo + n));
    return r;
  }
};

inline std::ostream& operator<<(std::ostream& os, const FlashShape& s) {
  return os << "B" << s.B << " T" << s.T << " NH" << s.NH << " KVH" << s.KVH << " HD" << s.HD;
}

// Head dims 64 and 128; T = 130 crosses two 64-row tiles (the last one 2 rows), T = 67 one.
inline std::vector<FlashShape> flashShapes() {
  return {{1, 130, 4, 2, 64}, {2, 67, 2, 2, 128}, {1, 67, 2, 1, 128}};
}

struct FlashReference {
  std::vector<double> out, lse, dqkv;
};

inline FlashReference flashReference(const FlashShape& s, const std::vector<float>& qkv,
                                     const std::vector<float>& dout, bool rounded) {
  auto R = [&](double x) { return rounded ? double(bf16ToFloat(floatToBf16(float(x)))) : x; };
  const double sc = 1.0 / std::sqrt(double(s.HD));
  const int group = s.NH / s.KVH;
  FlashReference r;
  r.out.assign(s.nOut(), 0.0);
  r.lse.assign(s.nLse(), 0.0);
  r.dqkv.assign(s.nQkv(), 0.0);
  std::vector<double> S(size_t(s.T));
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h) {
      const int g = h / group;
      auto dO = [&](int i, int d) { return R(dout[(size_t(b) * s.T + i) * s.C() + h * s.HD + d]); };
      auto outAt = [&](int i) { return r.out.data() + (size_t(b) * s.T + i) * s.C() + h * s.HD; };
      auto scores = [&](int i) {
        for (int j = 0; j <= i; ++j) {
          double acc = 0;
          for (int d = 0; d < s.HD; ++d) acc += R(qkv[s.q(b, i, h) + d]) * R(qkv[s.k(b, j, g) + d]);
          S[size_t(j)] = acc * sc;
        }
      };
      for (int i = 0; i < s.T; ++i) {
        scores(i);
        const double m = *std::max_element(S.begin(), S.begin() + i + 1);
        double l = 0;
        for (int j = 0; j <= i; ++j) l += std::exp(S[size_t(j)] - m);
        r.lse[(size_t(b) * s.NH + h) * s.T + i] = m + std::log(l);
        double* o = outAt(i);
        for (int j = 0; j <= i; ++j) {
          const double p = R(std::exp(S[size_t(j)] - m));
          for (int d = 0; d < s.HD; ++d) o[d] += p * R(qkv[s.v(b, j, g) + d]) / l;
        }
      }
      for (int i = 0; i < s.T; ++i) {
        scores(i);
        const double L = r.lse[(size_t(b) * s.NH + h) * s.T + i];
        double D = 0;
        for (int d = 0; d < s.HD; ++d) D += dO(i, d) * outAt(i)[d];
        for (int j = 0; j <= i; ++j) {
          const double p = std::exp(S[size_t(j)] - L);
          double dp = 0;
          for (int d = 0; d < s.HD; ++d) dp += dO(i, d) * R(qkv[s.v(b, j, g) + d]);
          const double ds = R(p * (dp - D)), p16 = R(p);
          for (int d = 0; d < s.HD; ++d) {
            r.dqkv[s.q(b, i, h) + d] += sc * ds * R(qkv[s.k(b, j, g) + d]);
            r.dqkv[s.k(b, j, g) + d] += sc * ds * R(qkv[s.q(b, i, h) + d]);
            r.dqkv[s.v(b, j, g) + d] += p16 * dO(i, d);
          }
        }
      }
    }
  return r;
}

inline double maxAbsDiff(const std::vector<float>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}
inline double maxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  return maxAbsDiff(a, std::vector<double>(b.begin(), b.end()));
}
// max |a - b| over max |b|: an error on the scale of the tensor's largest value.
template <class T_>
double relMaxDiff(const std::vector<float>& a, const std::vector<T_>& b) {
  std::vector<double> bd(b.begin(), b.end());
  double scale = 0;
  for (double v : bd) scale = std::max(scale, std::fabs(v));
  return maxAbsDiff(a, bd) / std::max(scale, 1e-30);
}

}  // namespace ts::kernels::test
