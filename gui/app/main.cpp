// trainscope: the desktop application. Thin: parse options, style, open the main window.
#include <QApplication>
#include <QCommandLineParser>
#include <QFile>

#include "AppStyle.h"
#include "MainWindow.h"

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
  parser.addOptions({preset, db, engine});
  parser.process(app);

  ts::gui::applyAppStyle(app);

  ts::gui::MainWindow::Options o;
  o.presetFile = parser.value(preset);
  o.dbPath = parser.value(db);
  o.enginePath = parser.value(engine);
  ts::gui::MainWindow w(o);
  w.show();
  return app.exec();
}
