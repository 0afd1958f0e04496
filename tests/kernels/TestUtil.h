#pragma once
// Helpers for kernel tests: random non-zero inputs, NaN poisoning, tolerance checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace ts::kernels::test {

inline std::vector<float> randomVec(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) {
    do x = dist(rng);
    while (x == 0.0f);
  }
  return v;
}

inline std::vector<float> nanVec(size_t n) {
  return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN());
}

inline std::vector<double> toDouble(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// |got - want| <= atol + rtol * |want| element-wise; reports the first few failures.
inline ::testing::AssertionResult allClose(const float* got, const double* want, size_t n,
                                           double rtol, double atol) {
  int bad = 0;
  ::testing::AssertionResult res = ::testing::AssertionSuccess();
  std::string msg;
  for (size_t i = 0; i < n; ++i) {
    const double err = std::fabs(double(got[i]) - want[i]);
    if (!(err <= atol + rtol * std::fabs(want[i]))) {  // also catches NaN
      if (bad < 5)
        msg += "  [" + std::to_string(i) + "] got " + std::to_string(got[i]) + " want " +
               std::to_string(want[i]) + "\n";
      ++bad;
    }
  }
  if (bad) return ::testing::AssertionFailure() << bad << " of " << n << " mismatches:\n" << msg;
  return res;
}

inline ::testing::AssertionResult allClose(const std::vector<float>& got,
                                           const std::vector<double>& want, double rtol,
                                           double atol) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size mismatch";
  return allClose(got.data(), want.data(), got.size(), rtol, atol);
}

inline ::testing::AssertionResult allClose(const std::vector<float>& got,
                                           const std::vector<float>& want, double rtol,
                                           double atol) {
  return allClose(got, std::vector<double>(want.begin(), want.end()), rtol, atol);
}

// fp64 reference of C = alpha * op(A) op(B) + beta * C (row-major, as Backend::matmul) with
// its summation bound sum |alpha a b| + |beta c| per element, for elements read through
// a(i, k) and b(k, j). beta 0 ignores C (it may be NaN-poisoned).
template <class GetA, class GetB>
void referenceGemm(int M, int N, int K, GetA a, GetB b, float alpha, float beta,
                   const std::vector<float>& C, std::vector<double>& want,
                   std::vector<double>& bound) {
  want.assign(size_t(M) * N, 0.0);
  bound.assign(want.size(), 0.0);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double acc = 0, mag = 0;
      for (int k = 0; k < K; ++k) {
        const double p = double(a(i, k)) * double(b(k, j));
        acc += p;
        mag += std::fabs(p);
      }
      const size_t idx = size_t(i) * N + j;
      want[idx] = alpha * acc + (beta == 0.0f ? 0.0 : double(beta) * C[idx]);
      bound[idx] = std::fabs(alpha) * mag + (beta == 0.0f ? 0.0 : std::fabs(beta * C[idx]));
    }
}

// Central finite difference of a scalar function f(x) (double) w.r.t. every element of x.
template <class F>
std::vector<double> finiteDiff(std::vector<double> x, F f, double h = 1e-5) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double fp = f(x);
    x[i] = x0 - h;
    const double fm = f(x);
    x[i] = x0;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

// As finiteDiff, for the listed elements of x only (g[k] is d f / d x[idx[k]]): for inputs
// too large to difference every element of, or where only part of x matters.
template <class F>
std::vector<double> finiteDiffAt(std::vector<double> x, const std::vector<size_t>& idx, F f,
                                 double h = 1e-5) {
  std::vector<double> g(idx.size());
  for (size_t k = 0; k < idx.size(); ++k) {
    const size_t i = idx[k];
    const double x0 = x[i];
    x[i] = x0 + h;
    const double fp = f(x);
    x[i] = x0 - h;
    const double fm = f(x);
    x[i] = x0;
    g[k] = (fp - fm) / (2 * h);
  }
  return g;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace ts::kernels::test
