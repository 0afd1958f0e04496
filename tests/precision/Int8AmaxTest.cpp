// amax and int8 per-row quantisation against fp64 references.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "trainscope/kernels/Numeric.h"

namespace {

namespace kc = ts::kernels::cpu;
const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(Amax, MatchesFp64ReferenceAndPropagatesInfNaN) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> ud(-5.0f, 5.0f);
  for (int64_t n : {1, 5, 31, 8193, 100000}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = ud(rng);
    x[size_t(n) / 2] = -7.25f;  // the largest magnitude is negative
    double ref = 0;
    for (float v : x) ref = std::max(ref, std::fabs(double(v)));
    EXPECT_EQ(double(kc::amax(x.data(), n)), ref) << n;
    x[size_t(n) - 1] = -kInf;
    EXPECT_EQ(kc::amax(x.data(), n), kInf) << n;
    x[0] = kNaN;
    EXPECT_TRUE(std::isnan(kc::amax(x.data(), n))) << n;
  }
  EXPECT_EQ(kc::amax(nullptr, 0), 0.0f);
  const float tiny[] = {-0.0f, std::numeric_limits<float>::denorm_min()};
  EXPECT_EQ(kc::amax(tiny, 2), std::numeric_limits<float>::denorm_min());
}

TEST(Int8Rows, QuantizeWithinHalfStepAndDequantizeExactly) {
  const int64_t rows = 37, cols = 1000;  // > threading threshold in total
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) x[r * cols + c] = nd(rng) * float(r + 1) * 0.1f;
  for (int64_t c = 0; c < cols; ++c) x[5 * cols + c] = 0.0f;  // all-zero row
  x[9 * cols + 3] = kInf;                                     // poisoned rows
  x[10 * cols + 999] = kNaN;
  std::vector<int8_t> q(x.size());
  std::vector<float> scales(static_cast<size_t>(rows)), y(x.size());
  kc::quantizeInt8Rows(x.data(), q.data(), scales.data(), rows, cols);
  kc::dequantizeInt8Rows(q.data(), scales.data(), y.data(), rows, cols);
  for (int64_t r = 0; r < rows; ++r) {
    if (r == 9 || r == 10) {
      EXPECT_TRUE(std::isnan(scales[r])) << r;
      for (int64_t c = 0; c < cols; ++c) {
        ASSERT_EQ(q[r * cols + c], 0);
        ASSERT_TRUE(std::isnan(y[r * cols + c]));
      }
      continue;
    }
    double amax = 0;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(double(x[r * cols + c])));
    EXPECT_NEAR(scales[r], amax / 127.0, amax / 127.0 * 1e-6) << r;
    bool hit127 = amax == 0;
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = r * cols + c;
      const double exact = amax == 0 ? 0.0 : double(x[i]) * 127.0 / amax;
      ASSERT_LE(std::abs(int(q[i])), 127);
      ASSERT_LE(std::fabs(q[i] - exact), 0.5 + 1e-4) << "row " << r << " col " << c;
      ASSERT_EQ(y[i], float(q[i]) * scales[r]);
      ASSERT_LE(std::fabs(double(y[i]) - x[i]), (0.5 + 1e-4) * amax / 127.0 * (1 + 1e-6));
      hit127 |= std::abs(int(q[i])) == 127;
    }
    EXPECT_TRUE(hit127) << "the row maximum maps to +-127, row " << r;
  }
  EXPECT_EQ(scales[5], 0.0f);
}

}  // namespace
