#pragma once
// The kernel timeline page: pick a profiled run (or be sent one with showRun), see its spans on
// the TimelineView, select a time range to aggregate it by kernel/op, click a span for its
// details and the host range that launched it, export the profile as a Chrome trace.
#include <cstdint>
#include <optional>
#include <vector>

#include <QWidget>

#include "trainscope/core/store/RunStore.h"
#include "trainscope/gui/RunRepository.h"
#include "trainscope/gui/TimelineModel.h"

class QComboBox;
class QGroupBox;
class QLabel;
class QLayout;
class QPushButton;
class QTableView;

namespace ts::gui {

class TimelineView;

class TimelinePage : public QWidget {
  Q_OBJECT
 public:
  explicit TimelinePage(RunRepository repo, QWidget* parent = nullptr);

  TimelineModel* model() const { return model_; }
  TimelineView* view() const { return view_; }
  TimelineRangeModel* rangeModel() const { return range_; }
  QTableView* rangeTable() const { return table_; }
  QComboBox* runPicker() const { return runs_; }
  QString detailsText() const;  // the details panel, as plain text
  QString statusText() const;
  // Writes the loaded profile as Chrome trace JSON; false with *error when there is none or the
  // file cannot be written.
  bool exportChromeTrace(const QString& path, QString* error = nullptr) const;
  void setShowDialogs(bool v) { showDialogs_ = v; }

 public slots:
  // Loads a run's profile; with a step, zooms to that step when a window covered it.
  void showRun(int64_t runId, std::optional<int64_t> step = std::nullopt);
  // Re-reads the run list of the picker (worker thread).
  void reloadRuns();

 signals:
  void loaded(int64_t runId);  // a run's profile is shown (or failed: see statusText())
  void message(const QString& text);

 private:
  QLayout* buildToolbar();
  QGroupBox* buildRangeBox();
  QGroupBox* buildDetailBox();
  void connectViews();
  void showWindow(int index);
  void onLoaded();
  void onRangeSelected(int64_t t0, int64_t t1);
  void recomputeRange();
  void showSpan(int32_t id);
  void exportDialog();
  void setStatus(const QString& text, bool error = false);

  RunRepository repo_;
  TimelineModel* model_;
  TimelineView* view_;
  TimelineRangeModel* range_;
  QComboBox* runs_;
  QComboBox* windows_;
  QComboBox* lanes_;
  QPushButton *fit_, *export_, *gotoHost_;
  QTableView* table_;
  QLabel* rangeLabel_;
  QLabel* details_;
  QLabel* status_;
  std::optional<int64_t> pendingStep_;
  int32_t hostOfSelected_ = -1;
  bool showDialogs_ = true;
  bool fillingRuns_ = false;
};

}  // namespace ts::gui
