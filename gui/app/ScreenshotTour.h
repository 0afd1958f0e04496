#pragma once
// The screenshot tour (`trainscope --screenshots DIR`, scripts/screenshots.sh): drives the real
// app against the real engine as a user would and saves what the screen shows — the live
// dashboard mid-run, the runs browser, the compare page with the two runs, the timeline of a
// profiled run, the planner with LLaMA-7B on a 24 GB GPU, and a run kept running while the app
// closed, re-attached by the reopened app. Every shot is checked
// (ScreenshotCheck); a shot that fails its checks is reported and the tour exits non-zero.
#include <QString>
#include <QStringList>
#include <vector>

namespace ts::gui {

class MainWindow;

struct TourOptions {
  QString outDir;
  int steps = 600;         // per run (the default preset learns addition in about this many)
  int timeoutMs = 300000;  // per wait
};

struct TourShot {
  QString name;  // file name without .png
  QString path;
  QStringList problems;  // empty: every check passed
};

// Blocks (spinning the event loop) until every shot is taken. `log` gets one line per step.
std::vector<TourShot> runScreenshotTour(MainWindow& window, const TourOptions& options,
                                        QStringList* log = nullptr);

}  // namespace ts::gui
