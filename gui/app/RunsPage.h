#pragma once
// The Runs page: every recorded run in a sortable, searchable table (RunsTableModel), with
// edit (name, tags, notes), delete (confirmed), metrics export, clone into the wizard and
// follow live. Database work runs on a worker thread (RunsBrowser).
#include <cstdint>

#include <QWidget>

#include "trainscope/gui/RunsTableModel.h"

class QComboBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QTableView;

namespace ts::gui {

class RunsPage : public QWidget {
  Q_OBJECT
 public:
  explicit RunsPage(RunRepository repo, QWidget* parent = nullptr);
  RunsTableModel* model() const { return model_; }
  RunsBrowser* browser() const { return browser_; }
  QTableView* view() const { return view_; }
  QLineEdit* searchField() const { return search_; }
  int64_t selectedRunId() const;
  void selectRun(int64_t id);
  void reload();
  // Asks first unless dialogs are off (tests, screenshots).
  void deleteSelected();
  void setShowDialogs(bool v) { showDialogs_ = v; }

 signals:
  void cloneRequested(int64_t id);
  void followRequested(int64_t id);
  void message(const QString& text);

 private:
  void editSelected();
  void exportSelected(RunsBrowser::ExportFormat format);
  void updateButtons();

  RunsTableModel* model_;
  RunsBrowser* browser_;
  QTableView* view_;
  QLineEdit* search_;
  QComboBox* status_;
  QLabel* count_;
  QPushButton *edit_, *delete_, *csv_, *json_, *clone_, *follow_;
  bool showDialogs_ = true;
};

}  // namespace ts::gui
