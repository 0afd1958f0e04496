// GUIs as real processes against the real engine and one real database file: a GUI killed
// with SIGKILL mid-run leaves its engine training to the end and the next GUI start follows the
// run; two GUIs launching into one database both train, record every step and list both runs.
#include <gtest/gtest.h>
#include <signal.h>

#include <QFileInfo>
#include <QProcess>
#include <QTabWidget>
#include <QTemporaryDir>
#include <optional>

#include "GuiTestUtil.h"
#include "MainWindow.h"
#include "RunDashboard.h"
#include "RunsPage.h"
#include "trainscope/core/store/RunStore.h"
#include "trainscope/gui/LiveRun.h"
#include "trainscope/gui/RunsTableModel.h"

using namespace ts::gui;
using ts::core::RunStore;
using ts::core::RunSummary;
using ts::gui::testutil::kWaitCapMs;
using ts::gui::testutil::waitFor;

namespace {

const QString kPreset = QString(TRAINSCOPE_PRESET_DIR) + "/default.json";

// The runs in the database, read as `trainscope-engine runs` would (empty while it does not
// exist yet or is locked for a moment).
std::vector<RunSummary> runsIn(const QString& db) {
  try {
    auto store = RunStore::open(db.toStdString(), RunStore::Mode::ReadOnly);
    return store.listRuns();
  } catch (const std::exception&) {
    return {};
  }
}

void startGui(QProcess& gui, const QString& db, int steps, int expectRuns = 0) {
  gui.setProgram(GUI_PROCESS_DRIVER);
  gui.setArguments({"--db", db, "--engine", TRAINSCOPE_ENGINE_BIN, "--preset", kPreset, "--steps",
                    QString::number(steps), "--expect-runs", QString::number(expectRuns)});
  gui.setProcessChannelMode(QProcess::MergedChannels);
  gui.start();
}

}  // namespace

TEST(GuiProcessE2e, KilledGuiLeavesTheEngineTrainingAndTheNextGuiShowsTheRun) {
  QTemporaryDir tmp;
  const QString db = tmp.filePath("runs.db");
  constexpr int kSteps = 1500;  // long enough to be mid-run when killed at step 50
  QProcess gui;
  startGui(gui, db, kSteps);
  ASSERT_TRUE(gui.waitForStarted()) << gui.errorString().toStdString();

  // Mid-run: the engine has recorded steps and is still training.
  std::optional<RunSummary> mid;
  ASSERT_TRUE(waitFor(
      [&] {
        if (gui.state() == QProcess::NotRunning) return true;
        auto runs = runsIn(db);
        if (runs.size() == 1 && runs[0].status == "running" && runs[0].steps >= 50) mid = runs[0];
        return mid.has_value();
      },
      kWaitCapMs));
  ASSERT_TRUE(mid) << "the GUI ended before its run was mid-way:\n" << gui.readAll().toStdString();
  ASSERT_GT(mid->pid, 0);
  ASSERT_EQ(::kill(static_cast<pid_t>(gui.processId()), SIGKILL), 0);
  ASSERT_TRUE(gui.waitForFinished());
  EXPECT_EQ(gui.exitStatus(), QProcess::CrashExit);

  // The next GUI start re-attaches to the run (still `running`) and follows it to the end.
  auto o = testutil::e2eOptions(tmp);
  o.reattach = true;
  MainWindow next(o);
  next.setShowDialogs(false);
  next.show();
  // The database is read off the GUI thread: the tab comes when that read lands.
  ASSERT_TRUE(waitFor([&] { return next.liveTabs()->count() > 0; }, kWaitCapMs))
      << "the next GUI does not show the running run";
  ASSERT_EQ(next.liveTabs()->count(), 1);
  RunDashboard* d = next.dashboard(0);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->run()->name().toStdString(), mid->name);
  EXPECT_EQ(d->run()->runId(), mid->id);
  ASSERT_TRUE(waitFor([&] { return !d->run()->isActive(); }, kWaitCapMs));
  EXPECT_EQ(d->run()->state(), RunState::Completed) << d->run()->finishReason().toStdString();
  EXPECT_EQ(d->run()->lastStep(), kSteps) << "the dashboard did not follow to the end";

  // The engine trained past the kill and recorded every step.
  const auto runs = runsIn(db);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].status, "completed") << runs[0].reason;
  EXPECT_EQ(runs[0].steps, kSteps);
  EXPECT_EQ(runs[0].lastStep, kSteps);  // steps count from 1
  EXPECT_GT(runs[0].lastStep, mid->lastStep);
}

TEST(GuiProcessE2e, TwoGuisOnOneDatabaseBothWork) {
  QTemporaryDir tmp;
  const QString db = tmp.filePath("runs.db");
  constexpr int kSteps = 300;
  QProcess other;  // a second GUI process: launches its run and waits to list both
  startGui(other, db, kSteps, /*expectRuns=*/2);
  ASSERT_TRUE(other.waitForStarted()) << other.errorString().toStdString();

  MainWindow win(testutil::e2eOptions(tmp));
  win.setShowDialogs(false);
  win.show();
  RunDashboard* d = win.launch({"--set", "train.steps=" + QString::number(kSteps)});
  ASSERT_NE(d, nullptr) << win.lastError().toStdString();
  ASSERT_TRUE(waitFor([&] { return !d->run()->isActive(); }, kWaitCapMs));
  EXPECT_EQ(d->run()->state(), RunState::Completed) << d->run()->finishReason().toStdString();

  // This GUI's Runs page lists both runs once the other one lands.
  RunsTableModel* m = win.runsPage()->model();
  EXPECT_TRUE(waitFor(
      [&] {
        if (m->rowsWithStatus("completed") >= 2) return true;
        if (!win.runsPage()->browser()->busy()) win.runsPage()->reload();
        return false;
      },
      kWaitCapMs))
      << m->rowsWithStatus("completed") << " completed runs listed";

  ASSERT_TRUE(waitFor([&] { return other.state() == QProcess::NotRunning; }, kWaitCapMs));
  const std::string said = other.readAll().toStdString();
  EXPECT_EQ(other.exitStatus(), QProcess::NormalExit) << said;
  EXPECT_EQ(other.exitCode(), 0) << said;
  EXPECT_NE(said.find("finished completed"), std::string::npos) << said;
  EXPECT_NE(said.find("runs page lists 2 completed runs"), std::string::npos) << said;

  const auto runs = runsIn(db);
  ASSERT_EQ(runs.size(), 2u);
  for (const auto& r : runs) {
    EXPECT_EQ(r.status, "completed") << r.name << ": " << r.reason;
    EXPECT_EQ(r.steps, kSteps) << r.name;
    EXPECT_EQ(r.lastStep, kSteps) << r.name;
  }
}
