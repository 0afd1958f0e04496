// End to end: the GUI's engine client starts the real trainscope-engine on the default preset,
// receives step events, the dashboard's charts hold points, and the run is in the database
// as finished.
#include <gtest/gtest.h>
#include <QDir>
#include <QElapsedTimer>
#include <QFileInfo>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include "ChartView.h"
#include "GuiTestUtil.h"
#include "MainWindow.h"
#include "RunDashboard.h"
#include "trainscope/core/store/RunStore.h"
#include "trainscope/gui/EngineClient.h"
#include "trainscope/gui/PresetLibrary.h"

using namespace ts::gui;

namespace {

// The engine binary is built with these tests (add_dependencies) and its run command must
// answer: a broken binary or CLI fails here instead of skipping.
void requireRunCommand() {
  const QString bin = TRAINSCOPE_ENGINE_BIN;
  ASSERT_TRUE(QFileInfo(bin).isExecutable()) << "engine binary not built: " << bin.toStdString();
  QProcess p;
  p.start(bin, {"run", "--help"});
  ASSERT_TRUE(p.waitForFinished(120000)) << "`trainscope-engine run --help` did not finish";
  ASSERT_EQ(p.exitStatus(), QProcess::NormalExit);
  ASSERT_EQ(p.exitCode(), 0) << "`trainscope-engine run --help` failed: "
                             << p.readAllStandardError().toStdString();
}

using ts::gui::testutil::waitFor;

}  // namespace

TEST(EngineE2e, DefaultPresetRunsToCompletion) {
  ASSERT_NO_FATAL_FAILURE(requireRunCommand());
  QTemporaryDir tmp;
  const QString db = tmp.filePath("runs.db");
  MainWindow::Options o;
  o.presetFile = QString(TRAINSCOPE_PRESET_DIR) + "/default.json";
  o.dbPath = db;
  o.enginePath = TRAINSCOPE_ENGINE_BIN;
  o.reattach = false;
  o.askOnClose = false;
  MainWindow win(o);
  win.setShowDialogs(false);
  win.resize(1440, 900);
  win.show();
  RunDashboard* d = win.launch({"--set", "train.steps=20", "--set", "train.eval_every=10"});
  ASSERT_NE(d, nullptr) << win.lastError().toStdString();
  LiveRun* run = d->run();
  bool shot = false;
  ASSERT_TRUE(waitFor(
      [&] {
        if (!shot && run->lastStep() >= 10) {  // mid-run picture for the README
          d->refresh();
          QString dir = qEnvironmentVariable("TRAINSCOPE_SCREENSHOT_DIR");
          if (dir.isEmpty()) dir = TRAINSCOPE_SCREENSHOT_DEFAULT;
          QDir().mkpath(dir);
          win.grab().save(QDir(dir).filePath("dashboard-e2e.png"));
          shot = true;
        }
        return !run->isActive();
      },
      testutil::kWaitCapMs))
      << "the run did not finish in time; last step " << run->lastStep();
  for (const auto& l : run->log())
    std::cerr << l.level.toStdString() << ": " << l.text.toStdString() << "\n";
  EXPECT_EQ(run->state(), RunState::Completed) << run->finishReason().toStdString();
  EXPECT_EQ(run->lastStep(), 20);
  EXPECT_GE(run->loss().size(), 10u);
  d->refresh();
  EXPECT_GT(d->lossChart()->pointCount(d->lossRawSeries()), 0);
  EXPECT_GT(d->lrChart()->pointCount(0), 0);
  EXPECT_GT(d->throughputChart()->pointCount(0), 0);

  // The engine recorded the run; the GUI's repository reads it back as finished.
  RunRepository repo(db.toStdString());
  QString err;
  const auto runs = repo.listRuns(&err);
  ASSERT_EQ(runs.size(), 1u) << err.toStdString();
  EXPECT_EQ(runs[0].status, "completed");
  EXPECT_EQ(runs[0].lastStep, 20);
}
