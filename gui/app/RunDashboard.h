#pragma once
// The live dashboard of one run: charts, memory bars, progress, log and controls. Redraws on
// a 10 Hz timer, only when the run changed, with one replace() per series of per-pixel
// min/max-reduced points.
#include <QWidget>

#include "trainscope/gui/LiveRun.h"

class QLabel;
class QLayout;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QSlider;
class QSpinBox;
class QTimer;

namespace ts::gui {

class ChartView;
class EngineClient;
class MemoryBars;

class RunDashboard : public QWidget {
  Q_OBJECT
 public:
  RunDashboard(LiveRun* run, EngineClient* client, QWidget* parent = nullptr);

  LiveRun* run() const { return run_; }
  EngineClient* client() const { return client_; }
  // Redraws now if anything changed (the timer calls this; the benchmark and tests too).
  void refresh();
  void setDeviceCapacity(int64_t bytes) {
    capacity_ = bytes;
    force_ = true;
  }

  ChartView* lossChart() const { return loss_; }
  ChartView* lrChart() const { return lr_; }
  ChartView* throughputChart() const { return tps_; }
  int lossRawSeries() const { return lossRaw_; }
  int lossSmoothSeries() const { return lossSmooth_; }
  QPushButton* stopButton() const { return stop_; }
  MemoryBars* memoryBars() const { return bars_; }
  // The figures line under the title: step, loss, throughput (and communication per step).
  QLabel* statsLabel() const { return stats_; }
  uint64_t redraws() const { return redraws_; }

 signals:
  void titleChanged(const QString& title);
  // The user clicked a profiled step on the throughput chart: show its kernel timeline.
  void timelineRequested(int64_t runId, int64_t step);
  void message(const QString& text);

 private:
  QLayout* buildHeader();
  void buildCharts();
  QWidget* buildLossBox();
  QWidget* buildMemoryBox();
  QLayout* buildGrid(QWidget* lossBox, QWidget* memBox);
  void connectControls();
  void openProfiledStep(double x);
  void updateControls();
  void refreshHeader();
  void refreshLossChart(double x0, double x1);
  void refreshRateCharts(double x0, double x1);
  void refreshMemory(double x0, double x1);
  void appendNewLog();

  LiveRun* run_;
  EngineClient* client_;
  QTimer* timer_;
  ChartView *loss_, *lr_, *tps_, *scale_, *memTime_;
  int lossRaw_, lossSmooth_, lossEval_, lrS_, tpsS_, tpsSmooth_, scaleS_;
  int distillCeS_ = -1, distillKlS_ = -1;  // added when a distillation run reports its terms
  std::vector<int> memTimeS_;
  MemoryBars* bars_;
  QLabel *state_, *stats_, *eta_, *params_;
  QProgressBar* progress_;
  QPlainTextEdit* log_;
  QSlider* smoothing_;
  QLabel* smoothingValue_;
  QPushButton *pause_, *resume_, *stop_, *checkpoint_, *profile_;
  QSpinBox* profileSteps_;
  uint64_t logShown_ = 0;
  uint64_t redraws_ = 0;
  int64_t capacity_ = 0;
  bool force_ = false;
};

}  // namespace ts::gui
