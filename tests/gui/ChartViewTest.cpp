// ChartView's axes as a reader sees them: a series that cannot go negative (loss, learning
// rate) never gets a negative axis from the padding, and a step axis ticks at round numbers.
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
