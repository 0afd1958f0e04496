// The screenshot checks fail when they should: an empty chart, a hidden or blank widget, a
// missing text, a grab taken before the points were drawn.
#include <gtest/gtest.h>
#include <QLabel>
#include <QTest>
#include <QVBoxLayout>

#include "ChartView.h"
#include "ScreenshotCheck.h"

using namespace ts::gui;

namespace {
struct Page {
  QWidget root;
  ChartView* chart;
  QLabel* label;
  QWidget* flat;
  Page() {
    auto* l = new QVBoxLayout(&root);
    chart = new ChartView("loss");
    label = new QLabel("step 40 of 100");
    flat = new QWidget;
    flat->setAutoFillBackground(true);
    flat->setMinimumSize(60, 40);
    l->addWidget(chart);
    l->addWidget(label);
    l->addWidget(flat);
    root.resize(640, 480);
    root.show();
    EXPECT_TRUE(QTest::qWaitForWindowExposed(&root));
  }
  QImage grab() {
    QCoreApplication::processEvents();
    return root.grab().toImage();
  }
};
QVector<QPointF> curve(int n) {
  QVector<QPointF> p;
  for (int i = 0; i < n; ++i) p.append({double(i), 3.0 / (1.0 + 0.1 * i)});
  return p;
}
}  // namespace

TEST(ScreenshotCheck, PassesOnADrawnChartAndVisibleText) {
  Page p;
  const int s = p.chart->addSeries("loss", QColor("#1f77b4"));
  p.chart->setPoints(s, curve(50));
  ScreenshotCheck c(&p.root, p.grab());
  c.chart(p.chart, "loss chart", 10).text("step 40").noText("engine not found");
  EXPECT_TRUE(c.ok()) << c.problems().join("; ").toStdString();
}

TEST(ScreenshotCheck, FailsOnAnEmptyChart) {
  Page p;
  p.chart->addSeries("loss", QColor("#1f77b4"));
  ScreenshotCheck c(&p.root, p.grab());
  c.chart(p.chart, "loss chart", 2);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(c.problems().join(" ").contains("no plotted series"));
}

TEST(ScreenshotCheck, FailsWhenThePointsAreNotInTheImage) {
  Page p;
  const int s = p.chart->addSeries("loss", QColor("#d62728"));
  const QImage before = p.grab();  // grabbed before the curve was drawn
  p.chart->setPoints(s, curve(50));
  p.grab();
  ScreenshotCheck c(&p.root, before);
  c.chart(p.chart, "loss chart", 10);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(c.problems().join(" ").contains("drawn in its colour"))
      << c.problems().join("; ").toStdString();
}

TEST(ScreenshotCheck, FailsOnHiddenOrBlankWidgetsAndMissingText) {
  Page p;
  ScreenshotCheck c(&p.root, p.grab());
  c.widget(p.flat, "flat panel").text("step 99");
  p.label->hide();
  c.widget(p.label, "label");
  const QString all = c.problems().join(" | ");
  EXPECT_TRUE(all.contains("flat panel: blank")) << all.toStdString();
  EXPECT_TRUE(all.contains("\"step 99\" not on screen")) << all.toStdString();
  EXPECT_TRUE(all.contains("label: not visible")) << all.toStdString();
  ScreenshotCheck d(&p.root, p.grab());
  d.noText("step 40");  // the label is hidden now
  EXPECT_TRUE(d.ok()) << d.problems().join("; ").toStdString();
}
