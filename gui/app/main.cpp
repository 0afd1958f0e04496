// trainscope: the desktop application. Thin: parse options, style, open the main window.
#include <QApplication>
#include <QCommandLineParser>
#include <QFile>

#include <QTimer>
#include <cstdio>

#include "AppStyle.h"
#include "MainWindow.h"
#include "ScreenshotTour.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setApplicationName("Trainscope");
  QApplication::setApplicationVersion(TRAINSCOPE_VERSION);
  QCommandLineParser parser;
  parser.setApplicationDescription("Trainscope: plan, launch and watch training runs");
  parser.addHelpOption();
  parser.addVersionOption();
  QCommandLineOption preset("preset", "Start the wizard from this config file.", "FILE");
  QCommandLineOption db("db", "Run database (default: $TRAINSCOPE_DB, else the user data dir).",
                        "FILE");
  QCommandLineOption engine("engine", "trainscope-engine binary (default: found next to the app).",
                            "FILE");
  QCommandLineOption shots("screenshots",
                           "Drive the app against the engine, save checked screenshots of each "
                           "section to DIR and exit (non-zero when a check fails).",
                           "DIR");
  QCommandLineOption steps("tour-steps", "Steps per run of the screenshot tour.", "N", "600");
  parser.addOptions({preset, db, engine, shots, steps});
  parser.process(app);

  ts::gui::applyAppStyle(app);

  ts::gui::MainWindow::Options o;
  o.presetFile = parser.value(preset);
  o.dbPath = parser.value(db);
  o.enginePath = parser.value(engine);
  if (parser.isSet(shots)) {
    o.reattach = false;
    o.askOnClose = false;
  }
  ts::gui::MainWindow w(o);
  w.show();
  if (parser.isSet(shots)) {
    QTimer::singleShot(0, &app, [&] {
      ts::gui::TourOptions t;
      t.outDir = parser.value(shots);
      t.steps = parser.value(steps).toInt();
      QStringList log;
      const auto taken = ts::gui::runScreenshotTour(w, t, &log);
      for (const auto& l : log) std::fprintf(stderr, "screenshots: %s\n", qPrintable(l));
      int bad = 0;
      for (const auto& s : taken) bad += !s.problems.isEmpty();
      std::fprintf(stderr, "screenshots: %d taken, %d with problems, in %s\n",
                   static_cast<int>(taken.size()), bad, qPrintable(t.outDir));
      QCoreApplication::exit(bad || taken.size() < 7 ? 1 : 0);
    });
  }
  return app.exec();
}
