#include "ScreenshotTour.h"

#include <functional>

#include <QCoreApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QLabel>
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

}  // namespace

std::vector<TourShot> runScreenshotTour(MainWindow& win, const TourOptions& o, QStringList* log) {
  std::vector<TourShot> shots;
  auto say = [&](const QString& s) {
    if (log) *log << s;
  };
  QDir().mkpath(o.outDir);
  win.setShowDialogs(false);
  win.resize(1440, 900);
  win.show();
  spinUntil([&] { return win.isVisible(); }, 5000);
  // What the engine can do decides the planner's verdicts and the wizard's launch.
  spinUntil([&] { return win.capabilities().known; }, 20000);
  say(win.capabilities().known ? "engine: " + win.capabilities().text
                               : "engine capabilities not known (engine not found?)");

  auto shoot = [&](const QString& name, const std::function<void(ScreenshotCheck&)>& checks,
                   bool settleFirst = true) {
    if (settleFirst) settle();
    TourShot shot;
    shot.name = name;
    shot.path = QDir(o.outDir).filePath(name + ".png");
    const QImage img = grabShot(&win);
    ScreenshotCheck check(&win, img);
    check.noText("engine not found");
    checks(check);
    shot.problems = check.problems();
    if (!img.save(shot.path)) shot.problems << "could not write " + shot.path;
    say(QStringLiteral("%1: %2").arg(
        name, shot.problems.isEmpty() ? QStringLiteral("ok") : shot.problems.join("; ")));
    shots.push_back(shot);
  };
  auto fail = [&](const QString& name, const QString& why) {
    shots.push_back({name, QString(), {why}});
    say(name + ": " + why);
  };

  // 1. Live: the default preset, profiled, launched from the app; shot half way.
  const QStringList profiled = {"--set", "profile.enabled=true", "--set", "profile.wait=40",
                                "--set", "profile.warmup=2",     "--set", "profile.active=3",
                                "--set", "profile.repeat=2"};
  const QString steps = QStringLiteral("train.steps=%1").arg(o.steps);
  const QString evalEvery = QStringLiteral("train.eval_every=%1").arg(std::max(1, o.steps / 12));
  RunDashboard* first = win.launch(QStringList{"--set", steps, "--set", evalEvery} + profiled);
  if (!first) {
    fail("live-dashboard", "launch failed: " + win.lastError());
    return shots;
  }
  win.showSection(MainWindow::Live);
  LiveRun* run1 = first->run();
  // The engine is paused a quarter of the way in and resumed just before the grab, so the shot
  // shows a running run however fast this machine trains or however starved the GUI is: a
  // shot taken while stepping on gave a fast run time to finish first.
  if (!spinUntil([&] { return run1->lastStep() >= o.steps / 4 || !run1->isActive(); },
                 o.timeoutMs)) {
    fail("live-dashboard", "the run made no progress");
    return shots;
  }
  auto enginePaused = [&] {
    for (const auto& l : run1->log())
      if (l.text.startsWith("paused at step")) return true;
    return false;
  };
  first->client()->send(core::CommandType::Pause);
  spinUntil([&] { return enginePaused() || !run1->isActive(); }, o.timeoutMs);
  settle();  // the charts draw every step up to the pause
  first->client()->send(core::CommandType::Resume);
  first->refresh();
  shoot(
      "live-dashboard",
      [&](ScreenshotCheck& c) {
        c.chart(first->lossChart(), "loss chart", 10)
            .chart(first->lrChart(), "learning-rate chart", 10)
            .chart(first->throughputChart(), "throughput chart", 5)
            .text("running");
      },
      /*settleFirst=*/false);
  if (!spinUntil([&] { return !run1->isActive(); }, o.timeoutMs)) {
    fail("runs", "the first run did not finish");
    return shots;
  }
  say(QStringLiteral("run 1 (#%1) finished at step %2").arg(run1->runId()).arg(run1->lastStep()));

  // 2. A second run to compare: bf16 instead of fp32, the same data and seed.
  RunDashboard* second =
      win.launch(QStringList{"--set", steps, "--set", evalEvery, "--set", "precision.policy=bf16",
                             "--set", "name=default-bf16"} +
                 profiled);
  if (!second || !spinUntil([&] { return !second->run()->isActive(); }, o.timeoutMs)) {
    fail("compare", "the second run did not run to its end: " + win.lastError());
    return shots;
  }
  const qint64 id1 = run1->runId(), id2 = second->run()->runId();
  say(QStringLiteral("run 2 (#%1) finished at step %2").arg(id2).arg(second->run()->lastStep()));

  // 3. Runs browser: both runs with their best eval loss.
  RunsPage* runs = win.runsPage();
  win.showSection(MainWindow::Runs);
  runs->reload();
  spinUntil([&] { return runs->model()->rowCount() >= 2; }, 20000);
  runs->selectRuns({id1, id2});
  shoot("runs", [&](ScreenshotCheck& c) {
    c.widget(runs->view(), "runs table").text("default-bf16").text("Best eval loss");
    for (int r = 0; r < runs->model()->rowCount(); ++r) {
      const QString best = runs->model()->index(r, RunsTableModel::BestEvalLoss).data().toString();
      if (best.isEmpty() || best == QStringLiteral("—"))
        c.text(QStringLiteral("best eval loss of row %1 (reads \"%2\")").arg(r + 1).arg(best));
    }
  });

  // 4. Compare the two.
  ComparePage* compare = win.comparePage();
  compare->compareRuns({id1, id2});
  win.showSection(MainWindow::Compare);
  spinUntil([&] { return !compare->model()->loading() && compare->model()->runCount() == 2; },
            30000);
  shoot("compare", [&](ScreenshotCheck& c) {
    c.chart(compare->chart(CompareModel::Metric::TrainLoss), "train-loss chart", 10)
        .widget(compare->summaryView(), "summary table")
        .widget(compare->memoryView(), "memory table")
        .text("precision.policy");
  });

  // 5. Timeline: opening the page shows the newest run's profile, zoomed to a profiled step.
  TimelinePage* timeline = win.timelinePage();
  win.showSection(MainWindow::Timeline);
  spinUntil(
      [&] {
        return timeline->model()->runId() == id2 && !timeline->model()->loading() &&
               timeline->model()->data();
      },
      30000);
  if (!second->run()->profiledWindows().empty()) {
    timeline->showRun(id2, second->run()->profiledWindows().front().first + 1);
    spinUntil([&] { return !timeline->model()->loading(); }, 30000);
  }
  shoot("timeline", [&](ScreenshotCheck& c) {
    c.widget(timeline->view(), "timeline").text(QStringLiteral("Run %1:").arg(id2));
    if (!timeline->model()->data() || timeline->model()->data()->spanCount() == 0)
      c.text("a loaded profile (status: " + timeline->statusText() + ")");
  });

  // 6. Planner: LLaMA-7B on one 24 GB GPU, everything that fits, each saying whether this
  // engine runs it there.
  PlannerPage* planner = win.planner();
  win.showSection(MainWindow::Planner);
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
  return shots;
}

}  // namespace ts::gui
