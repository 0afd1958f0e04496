// End to end: the real trainscope-engine profiles a few steps of the default preset into a run
// database; the timeline page loads that run, jumps to a profiled step, aggregates a range that
// matches the engine's own kernel_summary, and a screenshot of the page is saved to
// $TRAINSCOPE_SCREENSHOT_DIR (default <build>/screenshots) for people to look at.
#include <cmath>
#include <map>
#include <memory>

#include <gtest/gtest.h>
#include <QComboBox>
#include <QDir>
#include <QFileInfo>
#include <QImage>
#include <QProcess>
#include <QSignalSpy>
#include <QTableView>
#include <QTemporaryDir>
#include <QTest>

#include "GuiTestUtil.h"
#include "TimelinePage.h"
#include "TimelineView.h"
#include "trainscope/core/store/RunStore.h"
#include "trainscope/gui/TimelineModel.h"

using namespace ts::gui;
namespace core = ts::core;

namespace {

using ts::gui::testutil::screenshotDir;

// One profiled run of the real engine, shared by the tests of this file (it takes a while).
struct ProfiledRun {
  QTemporaryDir tmp;
  QString db;
  QString error;  // why there is none
};
const ProfiledRun& profiledRun() {
  static const std::unique_ptr<ProfiledRun> run = [] {
    auto r = std::make_unique<ProfiledRun>();
    const QString bin = TRAINSCOPE_ENGINE_BIN;
    if (!QFileInfo(bin).isExecutable()) {
      r->error = "engine binary not built: " + bin;
      return r;
    }
    r->db = r->tmp.filePath("runs.db");
    QProcess engine;
    engine.setProcessChannelMode(QProcess::ForwardedErrorChannel);
    engine.start(bin, {"run",       QString(TRAINSCOPE_PRESET_DIR) + "/default.json",
                       "--db",      r->db,
                       "--run-dir", r->tmp.filePath("run"),
                       "--set",     "train.steps=6",
                       "--set",     "train.eval_every=0",
                       "--set",     "profile.enabled=true",
                       "--set",     "profile.wait=1",
                       "--set",     "profile.warmup=1",
                       "--set",     "profile.active=3",
                       "--set",     "profile.repeat=1",
                       "--set",     "device.threads=2"});
    if (!engine.waitForFinished(120000))
      r->error = "engine did not finish";
    else if (engine.exitCode() != 0)
      r->error = "engine failed: " + engine.readAllStandardOutput().right(2000);
    return r;
  }();
  return *run;
}

}  // namespace

// Opening the page (as the app does at start and when the Timeline section is shown) loads the
// run its picker shows, the newest one, without the user picking another run and back.
TEST(TimelineE2e, OpeningThePageLoadsTheNewestRunsProfile) {
  const ProfiledRun& run = profiledRun();
  if (run.db.isEmpty()) GTEST_SKIP() << run.error.toStdString();
  ASSERT_TRUE(run.error.isEmpty()) << run.error.toStdString();
  auto store = core::RunStore::open(run.db.toStdString(), core::RunStore::Mode::ReadOnly);
  const int64_t id = store.listRuns().at(0).id;

  TimelinePage page{RunRepository(run.db.toStdString())};
  QSignalSpy loaded(&page, &TimelinePage::loaded);
  page.show();
  ASSERT_TRUE(loaded.wait(testutil::kWaitCapMs))
      << "the page never loaded a profile: " << page.statusText().toStdString();
  EXPECT_EQ(loaded.at(0).at(0).toLongLong(), id);
  EXPECT_EQ(page.runPicker()->currentData().toLongLong(), id);
  ASSERT_NE(page.model()->data(), nullptr) << page.statusText().toStdString();
  EXPECT_GT(page.model()->data()->spanCount(), 0u);
  EXPECT_TRUE(page.statusText().startsWith(QStringLiteral("Run %1:").arg(id)))
      << page.statusText().toStdString();
}

TEST(TimelineE2e, RealProfileLoadsMatchesTheEngineSummaryAndIsScreenshot) {
  const ProfiledRun& run = profiledRun();
  if (run.db.isEmpty()) GTEST_SKIP() << run.error.toStdString();
  ASSERT_TRUE(run.error.isEmpty()) << run.error.toStdString();
  const QString db = run.db;

  auto store = core::RunStore::open(db.toStdString(), core::RunStore::Mode::ReadOnly);
  const auto runs = store.listRuns();
  ASSERT_EQ(runs.size(), 1u);
  const int64_t id = runs[0].id;
  const auto summaries = store.kernelSummaries(id);
  ASSERT_EQ(summaries.size(), 1u) << "one profile window expected";
  const auto& summary = summaries[0].body;
  const int64_t firstStep = summary["first_step"].get<int64_t>();
  const int64_t lastStep = summary["last_step"].get<int64_t>();

  // The throughput chart's question: which window covers a step.
  auto windows = listProfileWindows(db.toStdString(), id);
  ASSERT_EQ(windows.size(), 1u);
  EXPECT_TRUE(windowCoveringStep(windows, firstStep + 1));
  EXPECT_FALSE(windowCoveringStep(windows, lastStep + 1));

  TimelinePage page{RunRepository(db.toStdString())};
  page.setShowDialogs(false);
  page.resize(1360, 860);
  page.show();
  QSignalSpy loaded(&page, &TimelinePage::loaded);
  page.showRun(id, firstStep + 1);
  ASSERT_TRUE(loaded.wait(testutil::kWaitCapMs));
  const TimelineData* d = page.model()->data();
  ASSERT_NE(d, nullptr) << page.statusText().toStdString();
  ASSERT_GT(d->spanCount(), 0u);
  ASSERT_EQ(d->windows().size(), 1u);
  const auto mark = d->stepMark(firstStep + 1);
  ASSERT_TRUE(mark);
  EXPECT_LE(page.view()->visibleStart(), mark->start);
  EXPECT_GE(page.view()->visibleEnd(), mark->end);

  // The whole window aggregated = the engine's kernel_summary: same ops, counts and totals.
  const auto rows = d->aggregate(d->begin(), d->end());
  std::map<std::pair<std::string, bool>, std::pair<int64_t, double>> engineOps;
  for (const auto& op : summary["ops"])
    engineOps[{op["name"].get<std::string>(), op["device"].get<bool>()}] = {
        op["count"].get<int64_t>(), op["total_ms"].get<double>()};
  ASSERT_EQ(rows.size(), engineOps.size());
  for (const auto& r : rows) {
    auto it = engineOps.find({r.name, r.device});
    ASSERT_NE(it, engineOps.end()) << r.name;
    EXPECT_EQ(r.count, it->second.first) << r.name;
    EXPECT_NEAR(r.totalNs / 1e6, it->second.second, 1e-3 + 1e-6 * it->second.second) << r.name;
  }

  // Select most of the shown step for the screenshot, and click its longest span.
  TimelineView* view = page.view();
  const QRect plot = view->plotRect();
  view->setSelection(mark->start + (mark->end - mark->start) / 10,
                     mark->start + (mark->end - mark->start) * 6 / 10);
  EXPECT_GT(page.rangeModel()->rowCount(), 0);
  int32_t longest = -1;
  for (int32_t i = 0; i < static_cast<int32_t>(d->spanCount()); ++i) {
    const auto& s = d->span(i);
    if (s.step == firstStep + 1 && s.depth > 0 && s.category != ts::profiler::SpanCategory::Block &&
        (longest < 0 || s.duration() > d->span(longest).duration()))
      longest = i;
  }
  ASSERT_GE(longest, 0);
  view->selectSpan(longest);
  EXPECT_TRUE(page.detailsText().contains(QString::fromStdString(d->spanName(longest))));
  (void)plot;

  QCoreApplication::processEvents();
  QTest::qWait(100);
  const QImage img = page.grab().toImage();
  const QString path = QDir(screenshotDir()).filePath("timeline-page.png");
  ASSERT_TRUE(img.save(path)) << path.toStdString();
  // Not blank: the plot area has several colours.
  std::map<QRgb, int> colours;
  const QRect r = view->geometry();
  for (int y = r.top(); y < r.bottom(); y += 7)
    for (int x = r.left(); x < r.right(); x += 7)
      ++colours[img.pixel(view->mapTo(&page, QPoint(x - r.left(), y - r.top())))];
  EXPECT_GT(colours.size(), 6u) << path.toStdString();
}
