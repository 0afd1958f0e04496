#pragma once
// The Runs page: every recorded run in a sortable, searchable table (RunsTableModel; the search
// covers names, notes, tags, technique badges and config values), with edit (name, tags,
// notes), delete (confirmed), metrics and trace export, resume from the last checkpoint, clone
// into the wizard, follow live, and compare 2+ selected runs. Database work runs on a worker
// thread (RunsBrowser).
#include <cstdint>

#include <QList>
#include <QMap>
#include <QWidget>

#include "trainscope/gui/RunsTableModel.h"

class QComboBox;
class QLabel;
class QLayout;
class QLineEdit;
class QPushButton;
class QTableView;
class QTimer;

namespace ts::gui {

class RunsPage : public QWidget {
  Q_OBJECT
 public:
  explicit RunsPage(RunRepository repo, QWidget* parent = nullptr);
  RunsTableModel* model() const { return model_; }
  RunsBrowser* browser() const { return browser_; }
  QTableView* view() const { return view_; }
  QLineEdit* searchField() const { return search_; }
  // The selected run when exactly one is selected (single-run actions), else 0.
  int64_t selectedRunId() const;
  QList<qint64> selectedRunIds() const;  // in table order
  void selectRun(int64_t id);
  void selectRuns(const QList<qint64>& ids, bool scroll = true);
  QPushButton* resumeButton() const { return resume_; }
  QPushButton* traceButton() const { return trace_; }
  QPushButton* compareButton() const { return compare_; }
  QPushButton* stopButton() const { return stop_; }
  // The loaded row of a run, or null.
  const core::RunSummary* runRow(int64_t id) const { return model_->run(model_->rowOfRun(id)); }
  // Sends `stop` to the selected running run through its control socket (Stop).
  void stopSelected();
  void reload();
  // Asks first unless dialogs are off (tests, screenshots). A running run is stopped first and
  // deleted once its engine has finished (never deleted under a live engine).
  void deleteSelected();
  void setShowDialogs(bool v) { showDialogs_ = v; }
  // Re-reads the running rows every couple of seconds while the page is visible.
  QTimer* runningRefreshTimer() const { return runningTimer_; }

 signals:
  void cloneRequested(int64_t id);
  void followRequested(int64_t id);
  void message(const QString& text);
  // The run's last recorded checkpoint (its file exists).
  void resumeRequested(int64_t runId, const QString& checkpointPath);
  // Two or more runs, in table order.
  void compareRequested(const QList<qint64>& ids);

 protected:
  void showEvent(QShowEvent* e) override;
  void hideEvent(QHideEvent* e) override;

 private:
  QLayout* buildFilters();
  void buildTable();
  QLayout* buildActions();
  void connectModel();
  void connectActions();
  void editSelected();
  void exportSelected(RunsBrowser::ExportFormat format);
  void exportTraceSelected();
  void updateButtons();
  void deletePendingStopped();

  RunsTableModel* model_;
  RunsBrowser* browser_;
  QTableView* view_;
  QLineEdit* search_;
  QComboBox* status_;
  QLabel* count_;
  QPushButton* refresh_;
  QList<qint64> keptSelection_;  // across model resets (filtering, reloads)
  QPushButton *edit_, *delete_, *csv_, *json_, *trace_, *clone_, *follow_, *resume_, *compare_,
      *stop_;
  QMap<qint64, bool> pendingDeletes_;  // stopped for deletion: id -> also delete its files
  QTimer* pendingTimer_;
  bool showDialogs_ = true;
  QTimer* runningTimer_ = nullptr;
};

}  // namespace ts::gui
