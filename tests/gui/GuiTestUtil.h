#pragma once
// Helpers shared by the widget and end-to-end tests.
#include <functional>

#include <QDir>
#include <QElapsedTimer>
#include <QString>
#include <QTest>

namespace ts::gui::testutil {

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

}  // namespace ts::gui::testutil
