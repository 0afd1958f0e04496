// End to end with the real engine: a run kept running when the app closed is controllable
// after the app reopens (through the control socket in its run folder), with its history;
// deleting a running run stops it first and never leaves it training into a deleted folder;
// "Stop runs" on close waits for each final checkpoint instead of killing the engine.
#include <gtest/gtest.h>
#include <signal.h>

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QPushButton>
#include <QSignalSpy>
#include <QStackedWidget>
#include <QTemporaryDir>
#include <QTest>

#include "GuiTestUtil.h"
#include "MainWindow.h"
#include "RunDashboard.h"
#include "RunsPage.h"
#include "trainscope/core/store/RunStore.h"
#include "trainscope/gui/EngineClient.h"

using namespace ts::gui;
using ts::gui::testutil::kWaitCapMs;
using ts::gui::testutil::waitFor;

namespace {

int currentSection(MainWindow& win) {
  auto* pages = win.centralWidget()->findChild<QStackedWidget*>();
  return pages ? pages->currentIndex() : -1;
}

bool logHas(const LiveRun& run, const QString& text) {
  for (const auto& l : run.log())
    if (l.text.contains(text)) return true;
  return false;
}

// Alive and not a zombie (an exited child not yet reaped is gone for our purposes).
bool processAlive(qint64 pid) {
  if (pid <= 0 || ::kill(static_cast<pid_t>(pid), 0) != 0) return false;
  QFile f(QStringLiteral("/proc/%1/stat").arg(pid));
  if (!f.open(QIODevice::ReadOnly)) return false;
  const QByteArray s = f.readAll();
  const int close = s.lastIndexOf(')');
  return close < 0 || close + 2 >= s.size() || s[close + 2] != 'Z';
}

std::optional<ts::core::RunDetail> runInDb(const QString& db, int64_t id) {
  try {
    return ts::core::RunStore::open(db.toStdString(), ts::core::RunStore::Mode::ReadOnly)
        .getRun(id);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// A long run launched from `win`, past its first few steps and memory samples.
RunDashboard* launchLongRun(MainWindow& win) {
  RunDashboard* d = win.launch({"--set", "train.steps=30000"});
  if (!d) return nullptr;
  if (!waitFor(
          [&] {
            return d->run()->lastStep() >= 20 && d->run()->runId() > 0 && d->run()->measured();
          },
          kWaitCapMs))
    return nullptr;
  return d;
}

}  // namespace

TEST(ReattachE2e, AReopenedAppControlsTheRunItKeptRunning) {
  QTemporaryDir tmp;
  auto options = testutil::e2eOptions(tmp);
  int64_t runId = 0;
  qint64 pid = 0;
  int64_t stepAtClose = 0;
  QString runDir;
  {
    MainWindow first(options);
    first.setShowDialogs(false);
    first.show();
    RunDashboard* d = launchLongRun(first);
    ASSERT_NE(d, nullptr) << first.lastError().toStdString();
    runId = d->run()->runId();
    pid = d->run()->hello().value("pid", qint64{0});
    runDir = d->run()->runDir();
    ASSERT_GT(pid, 0);
    ASSERT_FALSE(runDir.isEmpty());
    first.close();  // askOnClose off: keep running
    stepAtClose = d->run()->lastStep();
  }
  ASSERT_TRUE(processAlive(pid)) << "the kept run should still train";

  options.reattach = true;
  MainWindow again(options);
  again.setShowDialogs(false);
  QSignalSpy reattached(&again, &MainWindow::reattached);
  again.show();
  ASSERT_TRUE(waitFor([&] { return reattached.count() > 0; }, kWaitCapMs));
  EXPECT_EQ(reattached.first().first().toInt(), 1);
  EXPECT_EQ(currentSection(again), MainWindow::Live)
      << "a reopened app with a live run opens on Live";
  ASSERT_EQ(again.liveTabs()->count(), 1);
  RunDashboard* d = again.dashboard(0);
  LiveRun* run = d->run();
  EXPECT_EQ(run->runId(), runId);

  // Controls come back once the follower has reached the engine's socket.
  QPushButton *pauseB = nullptr, *resumeB = nullptr, *checkpointB = nullptr;
  for (auto* b : d->findChildren<QPushButton*>()) {
    if (b->text() == "Pause") pauseB = b;
    if (b->text() == "Resume") resumeB = b;
    if (b->text() == "Checkpoint now") checkpointB = b;
  }
  ASSERT_TRUE(pauseB && resumeB && checkpointB);
  ASSERT_TRUE(waitFor(
      [&] {
        d->refresh();
        return pauseB->isEnabled();
      },
      kWaitCapMs))
      << "state " << toString(run->state()).toStdString();
  EXPECT_TRUE(d->stopButton()->isEnabled());

  // The history from before the reopen: the engine's first log lines and the memory samples.
  EXPECT_TRUE(logHas(*run, "run directory")) << "the log from before the reopen is missing";
  ASSERT_FALSE(run->memoryOverTime().empty());
  ASSERT_GT(run->memoryOverTime()[0].size(), 0u);
  EXPECT_LE(run->memoryOverTime()[0].x(0), double(stepAtClose))
      << "memory history starts after the reopen";

  // Pause: the engine confirms it (its `paused` log line), and steps stop advancing.
  QTest::mouseClick(pauseB, Qt::LeftButton);
  ASSERT_TRUE(waitFor([&] { return logHas(*run, "paused at step"); }, kWaitCapMs));
  EXPECT_EQ(run->state(), RunState::Paused);
  // Checkpoint while paused lands now, not after the resume.
  d->refresh();
  ASSERT_TRUE(checkpointB->isEnabled());
  QTest::mouseClick(checkpointB, Qt::LeftButton);
  ASSERT_TRUE(waitFor([&] { return logHas(*run, "checkpoint at step"); }, kWaitCapMs));
  EXPECT_EQ(run->state(), RunState::Paused);
  d->refresh();
  ASSERT_TRUE(resumeB->isEnabled());
  QTest::mouseClick(resumeB, Qt::LeftButton);
  ASSERT_TRUE(waitFor([&] { return logHas(*run, "resumed at step"); }, kWaitCapMs));

  // Stop: the run ends as stopped with a final checkpoint, and its engine exits.
  d->refresh();
  QTest::mouseClick(d->stopButton(), Qt::LeftButton);
  ASSERT_TRUE(waitFor([&] { return !run->isActive(); }, kWaitCapMs));
  EXPECT_EQ(run->state(), RunState::Stopped) << run->finishReason().toStdString();
  ASSERT_TRUE(waitFor([&] { return !processAlive(pid); }, kWaitCapMs));
  auto row = runInDb(options.dbPath, runId);
  ASSERT_TRUE(row);
  EXPECT_EQ(row->status, "stopped");
  d->refresh();
  EXPECT_FALSE(d->stopButton()->isEnabled()) << "Stop stays enabled after the run ended";
  EXPECT_FALSE(checkpointB->isEnabled());
  EXPECT_FALSE(QFileInfo::exists(runDir + "/control.sock")) << "the socket outlived its engine";
}

TEST(ReattachE2e, DeletingARunningRunStopsItAndLeavesNothingBehind) {
  QTemporaryDir tmp;
  MainWindow win(testutil::e2eOptions(tmp));
  win.setShowDialogs(false);
  win.show();
  RunDashboard* d = launchLongRun(win);
  ASSERT_NE(d, nullptr) << win.lastError().toStdString();
  const int64_t id = d->run()->runId();
  const QString runDir = d->run()->runDir();
  ASSERT_TRUE(QFileInfo(runDir).isDir());

  win.showSection(MainWindow::Runs);
  RunsPage* page = win.runsPage();
  ASSERT_TRUE(waitFor([&] { return page->runRow(id) != nullptr; }, kWaitCapMs));
  page->selectRun(id);
  ASSERT_TRUE(page->stopButton()->isEnabled()) << "a running row offers Stop";
  page->deleteSelected();

  // The engine is stopped (not orphaned), then the row and the folder go, for good.
  ASSERT_TRUE(waitFor([&] { return !d->run()->isActive(); }, kWaitCapMs));
  EXPECT_EQ(d->run()->state(), RunState::Stopped) << d->run()->finishReason().toStdString();
  ASSERT_TRUE(waitFor([&] { return !d->client()->isRunning(); }, kWaitCapMs));
  ASSERT_TRUE(waitFor([&] { return !runInDb(win.databasePath(), id); }, kWaitCapMs))
      << "the stopped run was not deleted";
  EXPECT_FALSE(QFileInfo::exists(runDir)) << "the run folder came back or stayed";
}

TEST(ReattachE2e, TheStoreRefusesToDeleteARunUnderItsLiveEngine) {
  QTemporaryDir tmp;
  MainWindow win(testutil::e2eOptions(tmp));
  win.setShowDialogs(false);
  RunDashboard* d = launchLongRun(win);
  ASSERT_NE(d, nullptr) << win.lastError().toStdString();
  RunRepository repo(win.databasePath().toStdString());
  const QString err = repo.deleteRun(d->run()->runId(), true);
  EXPECT_TRUE(err.contains("still running")) << err.toStdString();
  EXPECT_TRUE(runInDb(win.databasePath(), d->run()->runId()));
  EXPECT_TRUE(QFileInfo(d->run()->runDir()).isDir());
  d->client()->send(ts::core::CommandType::Stop);
  ASSERT_TRUE(waitFor([&] { return !d->client()->isRunning(); }, kWaitCapMs));
}

TEST(ReattachE2e, StopRunsOnCloseWaitsForTheFinalCheckpoint) {
  QTemporaryDir tmp;
  MainWindow win(testutil::e2eOptions(tmp));
  win.setShowDialogs(false);
  win.show();
  RunDashboard* d = launchLongRun(win);
  ASSERT_NE(d, nullptr) << win.lastError().toStdString();
  const int64_t id = d->run()->runId();
  win.stopRunsAndClose();
  EXPECT_TRUE(win.isVisible()) << "the window must wait for the engine";
  ASSERT_TRUE(waitFor([&] { return !win.isVisible(); }, kWaitCapMs));
  auto row = runInDb(win.databasePath(), id);
  ASSERT_TRUE(row);
  EXPECT_EQ(row->status, "stopped") << row->reason;
  ts::core::RunStore store = ts::core::RunStore::open(win.databasePath().toStdString(),
                                                      ts::core::RunStore::Mode::ReadOnly);
  const auto cks = store.checkpoints(id);
  ASSERT_FALSE(cks.empty()) << "no final checkpoint";
  EXPECT_TRUE(QFileInfo::exists(QString::fromStdString(cks.back().path)));
}
