// ChartView's axes as a reader sees them: a series that cannot go negative (loss, learning
// rate) never gets a negative axis from the padding, and both axes tick at round numbers.
#include <cmath>

#include <gtest/gtest.h>

#include "ChartView.h"

using namespace ts::gui;

TEST(ChartView, NonNegativeSeriesKeepTheAxisAtOrAboveZero) {
  ChartView c("Loss");
  const int s = c.addSeries("loss", Qt::blue);
  // A converged loss: 2.0 falling to 1e-5, the padding below would reach -0.12.
  QVector<QPointF> pts;
  for (int i = 0; i <= 100; ++i) pts << QPointF(i, 2.0 * std::exp(-i / 8.0) + 1e-5);
  c.setPoints(s, pts);
  EXPECT_GE(c.yRange().first, 0.0);
  EXPECT_GT(c.yRange().second, 2.0);
  // A series that does go negative keeps its padding below.
  pts.clear();
  for (int i = 0; i <= 10; ++i) pts << QPointF(i, i - 5.0);
  c.setPoints(s, pts);
  EXPECT_LT(c.yRange().first, -5.0);
}

TEST(ChartView, StepAxisTicksAtRoundNumbers) {
  ChartView c("Loss");
  c.addSeries("loss", Qt::blue);
  // A 30,000-step run whose steps are numbered 0..29999: not 5999.8, 11999.6, 17999.4 ...
  c.setXRange(0, 29999);
  const QVector<double> ticks = c.xTicks();
  ASSERT_GE(ticks.size(), 4);
  EXPECT_LE(ticks.size(), 8);
  EXPECT_EQ(ticks.front(), 0.0);
  for (double t : ticks) EXPECT_EQ(std::fmod(t, 5000.0), 0.0) << t;
  c.setXRange(1, 437);
  for (double t : c.xTicks()) EXPECT_EQ(std::fmod(t, 50.0), 0.0) << t;
}

// A throughput series (15K..76K tokens/s): the y labels are round too (0, 20000, 40000 ...,
// not 20002, 40005), and the axis still starts at 0.
TEST(ChartView, ValueAxisTicksAtRoundNumbers) {
  ChartView c("Throughput");
  const int s = c.addSeries("tokens/s", Qt::blue);
  QVector<QPointF> pts;
  for (int i = 1; i <= 10; ++i) pts << QPointF(i, 15000 + 6100 * i);
  c.setPoints(s, pts);
  const QVector<double> ticks = c.yTicks();
  ASSERT_GE(ticks.size(), 3);
  EXPECT_EQ(ticks.front(), 0.0);
  EXPECT_GE(ticks.back(), 76000.0);
  const double step = ticks[1] - ticks[0];
  const double mantissa = step / std::pow(10.0, std::floor(std::log10(step)));
  EXPECT_TRUE(std::abs(mantissa - 1) < 1e-9 || std::abs(mantissa - 2) < 1e-9 ||
              std::abs(mantissa - 5) < 1e-9)
      << step;
  for (double t : ticks) EXPECT_NEAR(std::remainder(t, step), 0.0, 1e-9 * step) << t;
}

// A dashboard re-attached to a run first draws 0..1 (no steps known yet), then the run's whole
// length at once. Laid out under the old 0.2 interval that range was 5,000,000 tick items and
// froze the window; the interval must change first, and back again when the range shrinks.
TEST(ChartView, ARangeThatGrowsAMillionfoldKeepsAHandfulOfTicks) {
  ChartView c("Loss");
  c.addSeries("loss", Qt::blue);
  c.setXRange(0, 1);
  c.setXRange(0, 1e6);
  EXPECT_GE(c.xTicks().size(), 4);
  EXPECT_LE(c.xTicks().size(), 8);
  c.setXRange(0, 1);
  EXPECT_GE(c.xTicks().size(), 4);
  EXPECT_LE(c.xTicks().size(), 8);
  EXPECT_EQ(c.xTicks().back(), 1.0);
}
