// Residual add, accumulate, scale and the double sum of squares.
#include <gtest/gtest.h>

#include "TestUtil.h"
#include "trainscope/kernels/Backend.h"

using namespace ts::kernels;
using namespace ts::kernels::test;

TEST(Elementwise, ResidualAccumulateScale) {
  auto be = makeCpuBackend();
  for (int64_t n : {1, 37, 100003}) {
    const auto a = randomVec(n, 1), b = randomVec(n, 2);
    auto out = nanVec(n);
    be->residualForward(out.data(), a.data(), b.data(), n);
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = double(a[i]) + b[i];
    EXPECT_TRUE(allClose(out, want, 1e-7, 0));

    auto y = a;  // in place: out aliases a
    be->residualForward(y.data(), y.data(), b.data(), n);
    EXPECT_TRUE(allClose(y, want, 1e-7, 0));

    y = a;
    be->accumulate(y.data(), b.data(), n);
    EXPECT_TRUE(allClose(y, want, 1e-7, 0));

    y = a;
    be->scale(y.data(), n, -0.37f);
    for (int64_t i = 0; i < n; ++i) want[i] = double(a[i]) * -0.37;
    EXPECT_TRUE(allClose(y, want, 1e-6, 0));
  }
}

TEST(Elementwise, SumSquaresInDoubleAndDeterministic) {
  auto be = makeCpuBackend();
  for (int64_t n : {1, 61, 1000003}) {
    const auto x = randomVec(n, 3, -3.0f, 3.0f);
    double want = 0;
    for (float v : x) want += double(v) * v;
    be->setThreads(1);
    const double one = be->sumSquares(x.data(), n);
    be->setThreads(2);
    const double two = be->sumSquares(x.data(), n);
    EXPECT_EQ(two, be->sumSquares(x.data(), n));  // bitwise repeatable
    EXPECT_NEAR(one, want, 1e-12 * want);
    EXPECT_NEAR(two, want, 1e-12 * want);
  }
  be->setThreads(0);
}
