#pragma once
// The Runs page's table: every run in the database (RunStore::listRuns), sortable by any
// column and filtered by a text search (name, tags, notes) and a status, in memory so 10,000
// rows sort and filter without a round trip. Loading, edits, deletes and exports go through
// RunsBrowser on a worker thread; the view only paints.
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include <QAbstractTableModel>
#include <QObject>
#include <QString>

#include "trainscope/core/RunStore.h"
#include "trainscope/gui/RunRepository.h"

namespace ts::gui {

class RunsTableModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column {
    Id,
    Name,
    Status,
    Started,
    Duration,
    Steps,
    FinalLoss,
    BestEvalLoss,
    TokensPerS,
    PeakMemory,
    Tags,
    ColumnCount
  };
  // Qt::UserRole: the raw sort value (seconds, bytes, loss; missing values sort last).
  explicit RunsTableModel(QObject* parent = nullptr);

  void setRuns(std::vector<core::RunSummary> runs);
  // Case-insensitive substring of name, tags or notes; empty = all.
  void setSearchText(const QString& text);
  void setStatusFilter(const QString& status);  // empty = all
  const QString& searchText() const { return search_; }
  int totalRuns() const { return static_cast<int>(all_.size()); }
  const core::RunSummary* run(int row) const;
  int rowOfRun(int64_t id) const;  // -1 when filtered out or unknown

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;
  void sort(int column, Qt::SortOrder order = Qt::AscendingOrder) override;
  int sortColumn() const { return sortColumn_; }
  Qt::SortOrder sortOrder() const { return sortOrder_; }

 private:
  bool matches(const core::RunSummary& r) const;
  void rebuild();  // filter + sort all_ into rows_

  std::vector<core::RunSummary> all_;
  std::vector<int> rows_;  // indices into all_
  QString search_, status_;
  int sortColumn_ = Started;
  Qt::SortOrder sortOrder_ = Qt::DescendingOrder;
};

// Runs every database call of the Runs page on a worker thread, one at a time, and reports
// the outcome with a message fit for a status bar.
class RunsBrowser : public QObject {
  Q_OBJECT
 public:
  RunsBrowser(RunRepository repo, RunsTableModel* model, QObject* parent = nullptr);
  void reload();
  void rename(int64_t id, const QString& name);
  void setTags(int64_t id, const QStringList& tags);
  void setNotes(int64_t id, const QString& notes);
  void deleteRun(int64_t id, bool deleteFiles);
  enum class ExportFormat { Csv, Json };
  void exportMetrics(int64_t id, const QString& path, ExportFormat format);
  bool busy() const { return busy_ > 0; }

 signals:
  void loaded(int runs);
  // ok = false: message says what failed (naming the file / run).
  void done(bool ok, const QString& message);

 private:
  void edit(std::function<QString(RunRepository&)> op, QString okMessage, bool reloadAfter);
  RunRepository repo_;
  RunsTableModel* model_;
  int busy_ = 0;
};

// Metrics of one run as CSV (header step,time,loss,lr,grad_norm,loss_scale,tokens,tokens_per_s,
// step_ms,skipped; empty cells for missing values) or JSON ({"run":{...},"config":{...},
// "metrics":[...],"evals":[...]}), as `trainscope-engine runs export` writes them. Returns an error
// text, empty on success.
QString writeMetricsCsv(const core::RunDetail& run, const std::vector<core::StepRow>& steps,
                        const QString& path);
QString writeMetricsJson(const core::RunDetail& run, const std::vector<core::StepRow>& steps,
                         const std::vector<core::EvalRow>& evals, const QString& path);

}  // namespace ts::gui
