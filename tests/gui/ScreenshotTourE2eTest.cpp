// End to end: the screenshot tour (scripts/screenshots.sh) drives the real app against the real
// engine and every shot passes its checks: charts with their points drawn inside the plot
// area, tables filled, the newest run's profile on the timeline, suggestions on the planner
// (also on cuda with the default filter, GPU or not).
#include <gtest/gtest.h>

#include <QDir>
#include <QFileInfo>
#include <QImage>
#include <QTemporaryDir>
#include <iterator>

#include "GuiTestUtil.h"
#include "MainWindow.h"
#include "ScreenshotTour.h"

using namespace ts::gui;

TEST(ScreenshotTourE2e, EveryShotOfTheRealAppPassesItsChecks) {
  if (!QFileInfo(TRAINSCOPE_ENGINE_BIN).isExecutable()) GTEST_SKIP() << "engine not built";
  QTemporaryDir tmp;
  MainWindow win(testutil::e2eOptions(tmp));
  TourOptions t;
  t.outDir = QDir(testutil::screenshotDir()).filePath("tour");
  t.steps = 160;
  QStringList log;
  const auto shots = runScreenshotTour(win, t, &log);
  const std::string said = log.join("\n").toStdString();
  const char* names[] = {"live-dashboard", "runs",         "compare",     "timeline",
                         "planner",        "planner-cuda", "reopened-run"};
  ASSERT_EQ(shots.size(), std::size(names)) << said;
  for (const char* n : names) {
    bool found = false;
    for (const auto& s : shots) found = found || s.name == n;
    EXPECT_TRUE(found) << n << "\n" << said;
  }
  for (const auto& s : shots) {
    EXPECT_TRUE(s.problems.isEmpty())
        << s.name.toStdString() << ": " << s.problems.join("; ").toStdString();
    EXPECT_FALSE(QImage(s.path).isNull()) << s.path.toStdString();
  }
}
