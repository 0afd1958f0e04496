#include "ScreenshotTour.h"

#include <functional>

#include <QCoreApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QLabel>
#include <QPushButton>
#include <QTabWidget>
#include <QTableView>
#include <QThread>

#include "ChartView.h"
#include "ComparePage.h"
#include "MainWindow.h"
#include "PlannerPage.h"
#include "RunDashboard.h"
#include "RunsPage.h"
#include "ScreenshotCheck.h"
#include "TimelinePage.h"
#include "TimelineView.h"
#include "trainscope/gui/EngineClient.h"
#include "trainscope/gui/LiveRun.h"
#include "trainscope/gui/TimelineModel.h"

namespace ts::gui {
namespace {

bool spinUntil(const std::function<bool()>& cond, int ms) {
  QElapsedTimer t;
  t.start();
  while (!cond()) {
    if (t.elapsed() > ms) return false;
    QCoreApplication::processEvents(QEventLoop::AllEvents, 50);
    QThread::msleep(20);
  }
  return true;
}
void settle(int ms = 400) {
  spinUntil([] { return false; }, ms);
}

// One tour: the window, its options, the shots so far and the runs the later shots show. Each
// step that later steps need returns false when it failed (its failure is recorded).
class Tour {
 public:
  Tour(MainWindow& win, const TourOptions& o, QStringList* log) : win_(win), o_(o), log_(log) {}
  std::vector<TourShot> run();

 private:
  void say(const QString& s) {
    if (log_) *log_ << s;
  }
  void shoot(const QString& name, const std::function<void(ScreenshotCheck&)>& checks,
             bool settleFirst = true, QWidget* window = nullptr);
  void fail(const QString& name, const QString& why);
  QStringList runArgs(const QStringList& extra) const;
  void showWindow();
  bool liveDashboard();
  void pauseForTheShot(RunDashboard* dashboard);
  bool secondRun();
  void runsBrowser();
  void compare();
  void timeline();
  void planner();
  void reopened();
  void plannerOnCuda();

  MainWindow& win_;
  const TourOptions& o_;
  QStringList* log_;
  std::vector<TourShot> shots_;
  LiveRun* run1_ = nullptr;
  RunDashboard* second_ = nullptr;
  qint64 id1_ = 0, id2_ = 0;
};

std::vector<TourShot> Tour::run() {
  QDir().mkpath(o_.outDir);
  showWindow();
  if (!liveDashboard() || !secondRun()) return shots_;
  runsBrowser();
  compare();
  timeline();
  planner();
  plannerOnCuda();
  reopened();
  return shots_;
}

void Tour::shoot(const QString& name, const std::function<void(ScreenshotCheck&)>& checks,
                 bool settleFirst, QWidget* window) {
  if (settleFirst) settle();
  if (!window) window = &win_;
  TourShot shot;
  shot.name = name;
  shot.path = QDir(o_.outDir).filePath(name + ".png");
  const QImage img = grabShot(window);
  ScreenshotCheck check(window, img);
  check.noText("engine not found");
  checks(check);
  shot.problems = check.problems();
  if (!img.save(shot.path)) shot.problems << "could not write " + shot.path;
  say(QStringLiteral("%1: %2").arg(
      name, shot.problems.isEmpty() ? QStringLiteral("ok") : shot.problems.join("; ")));
  shots_.push_back(shot);
}

void Tour::fail(const QString& name, const QString& why) {
  shots_.push_back({name, QString(), {why}});
  say(name + ": " + why);
}

// Both runs: the tour's length, evaluated a dozen times, profiled in two short windows.
QStringList Tour::runArgs(const QStringList& extra) const {
  const QStringList profiled = {"--set", "profile.enabled=true", "--set", "profile.wait=40",
                                "--set", "profile.warmup=2",     "--set", "profile.active=3",
                                "--set", "profile.repeat=2"};
  const QString steps = QStringLiteral("train.steps=%1").arg(o_.steps);
  const QString evalEvery = QStringLiteral("train.eval_every=%1").arg(std::max(1, o_.steps / 12));
  return QStringList{"--set", steps, "--set", evalEvery} + extra + profiled;
}

void Tour::showWindow() {
  win_.setShowDialogs(false);
  win_.resize(1440, 900);
  win_.show();
  spinUntil([&] { return win_.isVisible(); }, 5000);
  // What the engine can do decides the planner's verdicts and the wizard's launch.
  spinUntil([&] { return win_.capabilities().known; }, 20000);
  say(win_.capabilities().known ? "engine: " + win_.capabilities().text
                                : "engine capabilities not known (engine not found?)");
}

// 1. Live: the default preset, profiled, launched from the app; shot half way.
bool Tour::liveDashboard() {
  RunDashboard* first = win_.launch(runArgs({}));
  if (!first) {
    fail("live-dashboard", "launch failed: " + win_.lastError());
    return false;
  }
  win_.showSection(MainWindow::Live);
  run1_ = first->run();
  if (!spinUntil([&] { return run1_->lastStep() >= o_.steps / 4 || !run1_->isActive(); },
                 o_.timeoutMs)) {
    fail("live-dashboard", "the run made no progress");
    return false;
  }
  pauseForTheShot(first);
  shoot(
      "live-dashboard",
      [&](ScreenshotCheck& c) {
        c.chart(first->lossChart(), "loss chart", 10)
            .chart(first->lrChart(), "learning-rate chart", 10)
            .chart(first->throughputChart(), "throughput chart", 5)
            .text("running");
      },
      /*settleFirst=*/false);
  if (!spinUntil([&] { return !run1_->isActive(); }, o_.timeoutMs)) {
    fail("runs", "the first run did not finish");
    return false;
  }
  say(QStringLiteral("run 1 (#%1) finished at step %2").arg(run1_->runId()).arg(run1_->lastStep()));
  return true;
}

// The engine is paused a quarter of the way in and resumed just before the grab, so the shot
// shows a running run however fast this machine trains or however starved the GUI is: a
// shot taken while stepping on gave a fast run time to finish first.
void Tour::pauseForTheShot(RunDashboard* first) {
  auto enginePaused = [&] {
    for (const auto& l : run1_->log())
      if (l.text.startsWith("paused at step")) return true;
    return false;
  };
  first->client()->send(core::CommandType::Pause);
  spinUntil([&] { return enginePaused() || !run1_->isActive(); }, o_.timeoutMs);
  settle();  // the charts draw every step up to the pause
  first->client()->send(core::CommandType::Resume);
  first->refresh();
}

// 2. A second run to compare: bf16 instead of fp32, the same data and seed.
bool Tour::secondRun() {
  second_ = win_.launch(runArgs({"--set", "precision.policy=bf16", "--set", "name=default-bf16"}));
  if (!second_ || !spinUntil([&] { return !second_->run()->isActive(); }, o_.timeoutMs)) {
    fail("compare", "the second run did not run to its end: " + win_.lastError());
    return false;
  }
  id1_ = run1_->runId();
  id2_ = second_->run()->runId();
  say(QStringLiteral("run 2 (#%1) finished at step %2").arg(id2_).arg(second_->run()->lastStep()));
  return true;
}

// 3. Runs browser: both runs with their best eval loss.
void Tour::runsBrowser() {
  RunsPage* runs = win_.runsPage();
  win_.showSection(MainWindow::Runs);
  runs->reload();
  spinUntil([&] { return runs->model()->rowCount() >= 2; }, 20000);
  runs->selectRuns({id1_, id2_});
  shoot("runs", [&](ScreenshotCheck& c) {
    c.widget(runs->view(), "runs table").text("default-bf16").text("Best eval loss");
    for (int r = 0; r < runs->model()->rowCount(); ++r) {
      const QString best = runs->model()->index(r, RunsTableModel::BestEvalLoss).data().toString();
      if (best.isEmpty() || best == QStringLiteral("—"))
        c.text(QStringLiteral("best eval loss of row %1 (reads \"%2\")").arg(r + 1).arg(best));
    }
  });
}

// 4. Compare the two.
void Tour::compare() {
  ComparePage* compare = win_.comparePage();
  compare->compareRuns({id1_, id2_});
  win_.showSection(MainWindow::Compare);
  spinUntil([&] { return !compare->model()->loading() && compare->model()->runCount() == 2; },
            30000);
  shoot("compare", [&](ScreenshotCheck& c) {
    c.chart(compare->chart(CompareModel::Metric::TrainLoss), "train-loss chart", 10)
        .widget(compare->summaryView(), "summary table")
        .widget(compare->memoryView(), "memory table")
        .text("precision.policy");
  });
}

// 5. Timeline: opening the page shows the newest run's profile, zoomed to a profiled step.
void Tour::timeline() {
  TimelinePage* timeline = win_.timelinePage();
  win_.showSection(MainWindow::Timeline);
  spinUntil(
      [&] {
        return timeline->model()->runId() == id2_ && !timeline->model()->loading() &&
               timeline->model()->data();
      },
      30000);
  if (!second_->run()->profiledWindows().empty()) {
    timeline->showRun(id2_, second_->run()->profiledWindows().front().first + 1);
    spinUntil([&] { return !timeline->model()->loading(); }, 30000);
  }
  shoot("timeline", [&](ScreenshotCheck& c) {
    c.widget(timeline->view(), "timeline").text(QStringLiteral("Run %1:").arg(id2_));
    if (!timeline->model()->data() || timeline->model()->data()->spanCount() == 0)
      c.text("a loaded profile (status: " + timeline->statusText() + ")");
  });
}

// 6. Planner: LLaMA-7B on one 24 GB GPU, everything that fits, each saying whether this
// engine runs it there.
void Tour::planner() {
  PlannerPage* planner = win_.planner();
  win_.showSection(MainWindow::Planner);
  planner->selectModel("shape:llama-7b");
  planner->setDeviceMemoryGiB(24);
  planner->setRanks(1);
  planner->setBackend("cuda");
  planner->setRunnableOnly(false);
  planner->recompute();
  settle(200);
  spinUntil([&] { return !planner->computing() && planner->lastOutput(); }, 60000);
  if (planner->planModel()->rowCount() > 0) planner->planView()->selectRow(0);
  shoot("planner", [&](ScreenshotCheck& c) {
    c.widget(planner->planView(), "suggestions")
        .text("llama-7b")
        .text("Runs here")
        .text("Suggestions that fit");
    if (planner->planModel()->rowCount() == 0) c.text("a suggestion row");
  });
}

// 8. A long run kept running when the app closed ("Keep running"), then the app reopened: it
// opens on Live with the run's history and working controls (through the engine's control
// socket). The run is then stopped from the reopened window.
void Tour::reopened() {
  // Ten tours long, so the curve before the reopen is a visible part of the run's chart.
  RunDashboard* d = win_.launch(
      {"--set", QStringLiteral("train.steps=%1").arg(o_.steps * 10), "--set", "name=kept-running"});
  if (!d) {
    fail("reopened-run", "launch failed: " + win_.lastError());
    return;
  }
  LiveRun* run = d->run();
  if (!spinUntil([&] { return run->lastStep() >= o_.steps && run->measured(); }, o_.timeoutMs)) {
    fail("reopened-run", "the kept run made no progress");
    return;
  }
  d->client()->detach();  // what "Keep running" does when the app closes
  MainWindow::Options o = win_.options();
  o.reattach = true;
  o.askOnClose = false;
  MainWindow again(o);
  again.setShowDialogs(false);
  again.resize(win_.size());
  again.show();
  RunDashboard* back = nullptr;
  spinUntil(
      [&] {
        for (int i = 0; i < again.liveTabs()->count(); ++i)
          if (again.dashboard(i)->run()->runId() == run->runId()) back = again.dashboard(i);
        if (back) back->refresh();
        return back && back->stopButton()->isEnabled() && back->run()->lastStep() > 0;
      },
      o_.timeoutMs);
  if (!back) {
    fail("reopened-run", "the reopened app did not re-attach to the kept run");
    return;
  }
  settle(1500);  // a few more steps on the charts
  back->refresh();
  shoot(
      "reopened-run",
      [&](ScreenshotCheck& c) {
        c.chart(back->lossChart(), "loss chart", 10)
            .text("Re-attached")
            .text("kept-running — running")
            .noText("followed from the database");
        if (!back->stopButton()->isEnabled()) c.text("an enabled Stop button");
      },
      /*settleFirst=*/false, &again);
  back->stopButton()->click();
  if (!spinUntil([&] { return !back->run()->isActive(); }, o_.timeoutMs))
    say("reopened-run: the kept run did not stop");
  again.close();
}

// 7. Planner on cuda as a user leaves it (the default filter, "fits and runs here"): planned
// for the 24 GB device whether or not this machine has one; without one every suggestion says
// so, and the reason is said once, in plain words (issue 47: an empty table and the CUDA
// runtime's error twice).
void Tour::plannerOnCuda() {
  PlannerPage* planner = win_.planner();
  win_.showSection(MainWindow::Planner);
  planner->selectModel("shape:llama-7b");
  planner->setDeviceMemoryGiB(24);
  planner->setRanks(1);
  planner->setBackend("cuda");
  planner->setRunnableOnly(true);
  planner->planView()->clearSelection();
  planner->recompute();
  settle(200);
  spinUntil([&] { return !planner->computing() && planner->lastOutput(); }, 60000);
  shoot("planner-cuda", [&](ScreenshotCheck& c) {
    c.widget(planner->planView(), "suggestions").text("llama-7b").text("QLoRA").noText("cudaError");
    if (planner->planModel()->rowCount() == 0) c.text("a suggestion row");
    if (!win_.capabilities().cudaAvailable) c.text("no usable CUDA device on this machine");
  });
}

}  // namespace

std::vector<TourShot> runScreenshotTour(MainWindow& win, const TourOptions& o, QStringList* log) {
  return Tour(win, o, log).run();
}

}  // namespace ts::gui
