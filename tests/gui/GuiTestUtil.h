#pragma once
// Helpers shared by the widget and end-to-end tests.
#include <functional>

#include <QDir>
#include <QElapsedTimer>
#include <QString>
#include <QTemporaryDir>
#include <QTest>

#include "../support/WaitUntil.h"

#ifdef TRAINSCOPE_ENGINE_BIN
#include "MainWindow.h"
#endif

namespace ts::gui::testutil {

using testsupport::kWaitCapMs;  // every wait below is on the event, capped only for broken runs

// Where screenshots go: $TRAINSCOPE_SCREENSHOT_DIR, else the build's screenshots/ folder.
inline QString screenshotDir() {
  QString d = qEnvironmentVariable("TRAINSCOPE_SCREENSHOT_DIR");
  if (d.isEmpty()) d = TRAINSCOPE_SCREENSHOT_DEFAULT;
  QDir().mkpath(d);
  return d;
}

// Spins the event loop until cond() holds or ms pass; false on timeout.
inline bool waitFor(const std::function<bool()>& cond, int ms) {
  QElapsedTimer t;
  t.start();
  while (!cond()) {
    if (t.elapsed() > ms) return false;
    QTest::qWait(50);
  }
  return true;
}

#ifdef TRAINSCOPE_ENGINE_BIN
// The main window of an end-to-end test: the default preset, a database in `tmp`, the real
// engine binary, no re-attaching and no close dialog.
inline MainWindow::Options e2eOptions(const QTemporaryDir& tmp) {
  MainWindow::Options o;
  o.presetFile = QString(TRAINSCOPE_PRESET_DIR) + "/default.json";
  o.dbPath = tmp.filePath("runs.db");
  o.enginePath = TRAINSCOPE_ENGINE_BIN;
  o.reattach = false;
  o.askOnClose = false;
  return o;
}
#endif

}  // namespace ts::gui::testutil
