#include <cmath>

#include <gtest/gtest.h>

#include "trainscope/gui/ChartReduction.h"
#include "trainscope/gui/SeriesBuffer.h"

using namespace ts::gui;

TEST(ChartReduction, EnvelopeKeepsASingleSpike) {
  std::vector<double> x, y;
  for (int i = 0; i < 100000; ++i) {
    x.push_back(i);
    y.push_back(1.0 + 0.001 * std::sin(i * 0.01));
  }
  y[54321] = 50.0;   // one spike up
  y[77777] = -20.0;  // one spike down
  const auto pts = minMaxEnvelope(x, y, 0, 99999, 400);
  ASSERT_LE(pts.size(), 800);
  double maxY = -1e9, minY = 1e9, xAtMax = -1;
  for (const auto& p : pts) {
    if (p.y() > maxY) {
      maxY = p.y();
      xAtMax = p.x();
    }
    minY = std::min(minY, p.y());
  }
  EXPECT_DOUBLE_EQ(maxY, 50.0);
  EXPECT_DOUBLE_EQ(xAtMax, 54321.0);  // at its true x, not a bucket centre
  EXPECT_DOUBLE_EQ(minY, -20.0);
}

TEST(ChartReduction, ShortSeriesPassesThroughUnchanged) {
  std::vector<double> x{0, 1, 2, 3, 4}, y{5, 4, 3, 2, 1};
  const auto pts = minMaxEnvelope(x, y, 0, 4, 500);
  ASSERT_EQ(pts.size(), 5);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(pts[i].x(), x[i]);
    EXPECT_EQ(pts[i].y(), y[i]);
  }
}

TEST(ChartReduction, EnvelopeRespectsRangeAndOrder) {
  std::vector<double> x, y;
  for (int i = 0; i < 10000; ++i) {
    x.push_back(i);
    y.push_back(i % 7);
  }
  const auto pts = minMaxEnvelope(x, y, 2000, 3000, 50);
  ASSERT_FALSE(pts.isEmpty());
  for (int i = 0; i < pts.size(); ++i) {
    EXPECT_GE(pts[i].x(), 2000);
    EXPECT_LE(pts[i].x(), 3000);
    if (i) EXPECT_LE(pts[i - 1].x(), pts[i].x());
  }
}

TEST(ChartReduction, DebiasedEmaMatchesDefinition) {
  // Reference: the bias-corrected EMA written out directly.
  const std::vector<double> y{3, 1, 4, 1, 5, 9, 2, 6};
  const double w = 0.6;
  const auto s = debiasedEma(y, w);
  double num = 0, den = 0;
  for (size_t t = 0; t < y.size(); ++t) {
    // s_t = sum_k (1-w) w^(t-k) y_k / (1 - w^(t+1))
    num = 0;
    for (size_t k = 0; k <= t; ++k) num += (1 - w) * std::pow(w, double(t - k)) * y[k];
    den = 1 - std::pow(w, double(t + 1));
    EXPECT_NEAR(s[t], num / den, 1e-12);
  }
  EXPECT_DOUBLE_EQ(s[0], 3.0);  // debiased: the first value is not pulled towards zero
  const auto none = debiasedEma(y, 0.0);
  for (size_t i = 0; i < y.size(); ++i) EXPECT_DOUBLE_EQ(none[i], y[i]);
}

TEST(SeriesBuffer, CompactionBoundsMemoryAndKeepsExtremes) {
  SeriesBuffer b(1024);
  for (int i = 0; i < 100000; ++i) b.append(i, i == 31337 ? 1000.0 : (i % 2 ? 1.0 : 2.0));
  EXPECT_LE(b.size(), 1024u);
  EXPECT_EQ(b.appended(), 100000u);
  EXPECT_EQ(b.lastX(), 99999);
  double mx = 0, mn = 1e9;
  double meanSum = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    mx = std::max(mx, b.max(i));
    mn = std::min(mn, b.min(i));
    if (i) EXPECT_LT(b.x(i - 1), b.x(i));
  }
  EXPECT_EQ(mx, 1000.0);
  EXPECT_EQ(mn, 1.0);
  // Means of merged alternating 1/2 buckets are 1.5 (away from the spike).
  EXPECT_NEAR(b.mean(3), 1.5, 1e-6);
  (void)meanSum;
  const auto pts = minMaxEnvelope(b, 0, 99999, 300);
  double pmax = 0;
  for (const auto& p : pts) pmax = std::max(pmax, p.y());
  EXPECT_EQ(pmax, 1000.0);
}
