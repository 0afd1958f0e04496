// End to end through the main window with the real engine: a click on a profiled step of the
// throughput chart opens that step on the kernel timeline, and Resume on the Runs page
// continues a recorded run from its checkpoint to the end.
#include <gtest/gtest.h>

#include <QDir>
#include <QElapsedTimer>
#include <QFileInfo>
#include <QStackedWidget>
#include <QTemporaryDir>
#include <QTest>

#include "ChartView.h"
#include "GuiTestUtil.h"
#include "MainWindow.h"
#include "RunDashboard.h"
#include "RunsPage.h"
#include "TimelinePage.h"
#include "trainscope/gui/TimelineModel.h"

using namespace ts::gui;

namespace {

using ts::gui::testutil::waitFor;

MainWindow::Options optionsFor(const QTemporaryDir& tmp) {
  return ts::gui::testutil::e2eOptions(tmp);
}

RunDashboard* runToEnd(MainWindow& win, const QStringList& args) {
  RunDashboard* d = win.launch(args);
  if (!d) return nullptr;
  if (!waitFor([&] { return !d->run()->isActive(); }, testutil::kWaitCapMs)) return nullptr;
  return d;
}

int currentSection(MainWindow& win) {
  auto* pages = win.findChild<QStackedWidget*>(QString(), Qt::FindDirectChildrenOnly);
  if (!pages) pages = win.centralWidget()->findChild<QStackedWidget*>();
  return pages ? pages->currentIndex() : -1;
}

}  // namespace

TEST(MainWindowE2e, ClickOnAProfiledStepOpensItsTimeline) {
  if (!QFileInfo(TRAINSCOPE_ENGINE_BIN).isExecutable()) GTEST_SKIP() << "engine not built";
  QTemporaryDir tmp;
  MainWindow win(optionsFor(tmp));
  win.setShowDialogs(false);
  win.resize(1440, 900);
  win.show();
  RunDashboard* d =
      runToEnd(win, {"--set", "train.steps=8", "--set", "profile.enabled=true", "--set",
                     "profile.wait=2", "--set", "profile.warmup=1", "--set", "profile.active=2"});
  ASSERT_NE(d, nullptr) << win.lastError().toStdString();
  ASSERT_EQ(d->run()->state(), RunState::Completed) << d->run()->finishReason().toStdString();
  ASSERT_FALSE(d->run()->profiledWindows().empty()) << "no kernel_summary reached the dashboard";
  const auto [first, last] = d->run()->profiledWindows().front();
  d->refresh();

  // Find the pixel of the chart whose x is the profiled step, then click it like a user.
  ChartView* tps = d->throughputChart();
  QWidget* plot = tps->plotWidget();
  QPoint hit(-1, -1);
  for (int px = 0; px < plot->width(); ++px) {
    const QPoint p(px, plot->height() / 2);
    if (std::abs(tps->xAt(p) - double(first)) < 0.3) {
      hit = p;
      break;
    }
  }
  ASSERT_GE(hit.x(), 0) << "step " << first << " is not on the chart";
  QTest::mouseClick(plot, Qt::LeftButton, {}, hit);
  EXPECT_EQ(currentSection(win), MainWindow::Timeline);
  TimelinePage* page = win.timelinePage();
  ASSERT_TRUE(waitFor(
      [&] {
        return !page->model()->loading() && page->model()->runId() == d->run()->runId() &&
               page->model()->data() && page->model()->data()->spanCount() > 0;
      },
      testutil::kWaitCapMs))
      << page->statusText().toStdString();
  auto window = page->model()->data()->windowForStep(first);
  ASSERT_TRUE(window.has_value());

  // A click far from any profiled step explains instead of jumping.
  win.showSection(MainWindow::Live);
  QString said;
  QObject::connect(d, &RunDashboard::message, [&](const QString& m) { said = m; });
  QPoint miss(-1, -1);
  for (int px = plot->width() - 1; px >= 0; --px) {
    const double x = tps->xAt(QPoint(px, plot->height() / 2));
    if (x < 7.5 && x > double(last) + 2.5) {
      miss = QPoint(px, plot->height() / 2);
      break;
    }
  }
  ASSERT_GE(miss.x(), 0) << "no unprofiled step on the chart";
  {
    QTest::mouseClick(plot, Qt::LeftButton, {}, miss);
    EXPECT_TRUE(said.contains("not profiled"))
        << "said: " << said.toStdString() << " windows " << d->run()->profiledWindows().size()
        << " first " << first << " last " << last << " x " << tps->xAt(miss);
    EXPECT_EQ(currentSection(win), MainWindow::Live);
  }
}

TEST(MainWindowE2e, ResumeContinuesARunFromItsCheckpoint) {
  if (!QFileInfo(TRAINSCOPE_ENGINE_BIN).isExecutable()) GTEST_SKIP() << "engine not built";
  QTemporaryDir tmp;
  MainWindow win(optionsFor(tmp));
  win.setShowDialogs(false);
  win.show();
  RunDashboard* d = runToEnd(win, {"--set", "train.steps=6", "--set", "train.checkpoint_every=3"});
  ASSERT_NE(d, nullptr) << win.lastError().toStdString();
  ASSERT_EQ(d->run()->state(), RunState::Completed) << d->run()->finishReason().toStdString();
  const int64_t id = d->run()->runId();
  ASSERT_GT(id, 0);

  RunRepository repo(win.databasePath().toStdString());
  std::string mid;
  for (const auto& c : repo.checkpoints())
    if (c.runId == id && c.step == 3) mid = c.path;
  ASSERT_FALSE(mid.empty()) << "no step-3 checkpoint recorded";

  // What the Runs page's Resume button asks for.
  emit win.runsPage()->resumeRequested(id, QString::fromStdString(mid));
  // The run's record is read off the GUI thread; the dashboard opens when it lands.
  ASSERT_TRUE(waitFor([&] { return win.liveTabs()->count() == 2; }, testutil::kWaitCapMs))
      << win.lastError().toStdString();
  RunDashboard* r = win.dashboard(1);
  ASSERT_TRUE(waitFor([&] { return !r->run()->isActive(); }, testutil::kWaitCapMs));
  EXPECT_EQ(r->run()->state(), RunState::Completed) << r->run()->finishReason().toStdString();
  EXPECT_EQ(r->run()->lastStep(), 6);
  // Only the steps after the checkpoint were trained again.
  EXPECT_EQ(r->run()->loss().size(), 3u);
}
