// A real GUI process for GuiProcessE2eTest: the main window on a database launches a run of
// its preset, so a test can SIGKILL a GUI mid-run or run two GUIs on one database.
//
//   gui_process_driver --db FILE --engine FILE --preset FILE [--steps N] [--expect-runs M]
//
// Prints "launched" once its engine runs and "finished <state>" when the run ends. With
// --expect-runs it then reloads its Runs page until it lists M completed runs, prints
// "runs page lists M completed runs" and exits 0; any failure (or the wait cap) exits 1.
#include <QApplication>
#include <QCommandLineParser>
#include <QElapsedTimer>
#include <QTimer>
#include <cstdio>

#include "../support/WaitUntil.h"
#include "MainWindow.h"
#include "RunDashboard.h"
#include "RunsPage.h"
#include "trainscope/gui/LiveRun.h"
#include "trainscope/gui/RunsTableModel.h"

using namespace ts::gui;

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QCommandLineParser p;
  QCommandLineOption db("db", "database", "FILE"), engine("engine", "engine binary", "FILE"),
      preset("preset", "config", "FILE"), steps("steps", "train.steps", "N", "0"),
      expect("expect-runs", "completed runs to wait for", "M", "0");
  p.addOptions({db, engine, preset, steps, expect});
  p.process(app);

  MainWindow::Options o;
  o.presetFile = p.value(preset);
  o.dbPath = p.value(db);
  o.enginePath = p.value(engine);
  o.reattach = false;
  o.askOnClose = false;
  MainWindow win(o);
  win.setShowDialogs(false);
  win.show();

  QStringList args;
  if (p.value(steps).toInt() > 0)
    args << "--set"
         << "train.steps=" + p.value(steps);
  RunDashboard* d = win.launch(args);
  if (!d) {
    std::printf("launch failed: %s\n", qPrintable(win.lastError()));
    return 1;
  }
  std::printf("launched\n");
  std::fflush(stdout);

  const int expectRuns = p.value(expect).toInt();
  bool reported = false;
  QElapsedTimer clock;
  clock.start();
  QTimer poll;
  QObject::connect(&poll, &QTimer::timeout, [&] {
    if (clock.elapsed() > ::testsupport::kWaitCapMs) {
      std::printf("gave up after %lld ms\n", static_cast<long long>(clock.elapsed()));
      QCoreApplication::exit(1);
      return;
    }
    if (d->run()->isActive()) return;
    if (!reported) {
      reported = true;
      std::printf("finished %s\n", qPrintable(toString(d->run()->state())));
      std::fflush(stdout);
      if (d->run()->state() != RunState::Completed) QCoreApplication::exit(1);
      if (expectRuns <= 0) QCoreApplication::exit(0);
    }
    RunsTableModel* m = win.runsPage()->model();
    if (m->rowsWithStatus("completed") >= expectRuns) {
      std::printf("runs page lists %d completed runs\n", m->rowsWithStatus("completed"));
      std::fflush(stdout);
      QCoreApplication::exit(0);
    } else if (!win.runsPage()->browser()->busy()) {
      win.runsPage()->reload();  // the other GUI's run lands in the database, not here
    }
  });
  poll.start(200);
  return app.exec();
}
