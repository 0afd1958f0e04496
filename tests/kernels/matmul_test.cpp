// Matmul vs an fp64 triple loop: all transposes, alpha/beta, NaN-poisoned C when beta = 0.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "TestUtil.h"
#include "trainscope/kernels/Backend.h"

using namespace ts::kernels;
using namespace ts::kernels::test;

namespace {
struct Shape {
  int M, N, K;
};

void checkMatmul(Backend& be, Shape s, bool ta, bool tb, float alpha, float beta, uint32_t seed) {
  const auto A = randomVec(size_t(s.M) * s.K, seed);
  const auto B = randomVec(size_t(s.K) * s.N, seed + 1);
  auto C = beta == 0.0f ? nanVec(size_t(s.M) * s.N) : randomVec(size_t(s.M) * s.N, seed + 2);
  std::vector<double> want, bound;
  referenceGemm(
      s.M, s.N, s.K,
      [&](int i, int k) { return ta ? A[size_t(k) * s.M + i] : A[size_t(i) * s.K + k]; },
      [&](int k, int j) { return tb ? B[size_t(j) * s.K + k] : B[size_t(k) * s.N + j]; }, alpha,
      beta, C, want, bound);
  be.matmul(C.data(), A.data(), B.data(), s.M, s.N, s.K, ta, tb, alpha, beta);
  for (size_t i = 0; i < C.size(); ++i) {
    ASSERT_TRUE(std::isfinite(C[i])) << "index " << i;
    ASSERT_NEAR(C[i], want[i], 2e-6 * bound[i] + 1e-7)
        << "M=" << s.M << " N=" << s.N << " K=" << s.K << " ta=" << ta << " tb=" << tb
        << " alpha=" << alpha << " beta=" << beta << " index " << i;
  }
}
}  // namespace

class MatmulTest : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(MatmulTest, MatchesFp64ReferenceOnOddShapes) {
  auto be = makeCpuBackend();
  const auto [ta, tb] = GetParam();
  const Shape shapes[] = {{7, 13, 37}, {61, 37, 13}, {1, 1, 1},    {1, 61, 7},
                          {37, 1, 61}, {13, 7, 1},   {97, 67, 129}};
  uint32_t seed = 10;
  for (const Shape& s : shapes) {
    checkMatmul(*be, s, ta, tb, 1.0f, 0.0f, seed++);
    checkMatmul(*be, s, ta, tb, 0.75f, 0.0f, seed++);
    checkMatmul(*be, s, ta, tb, 1.0f, 1.0f, seed++);  // accumulate (gradient +=)
    checkMatmul(*be, s, ta, tb, -0.5f, 0.3f, seed++);
  }
}

TEST_P(MatmulTest, TwoThreadsMatchReference) {
  auto be = makeCpuBackend();
  be->setThreads(2);
  const auto [ta, tb] = GetParam();
  checkMatmul(*be, {129, 113, 131}, ta, tb, 1.0f, 0.0f, 99);
  checkMatmul(*be, {129, 113, 131}, ta, tb, 0.5f, 1.0f, 98);
  be->setThreads(0);
}

INSTANTIATE_TEST_SUITE_P(AllTransposes, MatmulTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "T" : "N") +
                                  (std::get<1>(info.param) ? "T" : "N");
                         });
