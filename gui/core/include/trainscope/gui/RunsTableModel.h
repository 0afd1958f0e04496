#pragma once
// The Runs page's table: every run in the database (RunStore::listRuns), sortable by any
// column and filtered by a text search (name, tags, notes, technique badges and config values)
// and a status, in memory so 10,000 rows sort and filter without a round trip. Each run's
// badges and lowercase search text are prepared with its entry (on RunsBrowser's worker
// thread); loading, edits, deletes and exports go through RunsBrowser; the view only paints.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <QAbstractTableModel>
#include <QList>
#include <QObject>
#include <QString>
#include <QStringList>
#include <nlohmann/json.hpp>

#include "trainscope/core/store/RunStore.h"
#include "trainscope/gui/RunRepository.h"

namespace ts::gui {

// Short labels of the techniques a run's (resolved) config turns on, in a fixed order:
// bf16 / fp16 / fp8 / pure bf16, ckpt, ZeRO-n, offload, compress, flash, accum, 8-bit opt,
// LoRA / QLoRA, distill, profile. Missing or malformed keys count as "off".
QStringList techniqueBadges(const nlohmann::json& config);
// The Model column: the family's display name, and the base's folder when it fine-tunes one.
QString modelLabel(const nlohmann::json& config);

// One row of the Runs table: the summary plus what is derived from its config.
struct RunEntry {
  core::RunSummary summary;
  QStringList badges;
  // The model: its family and, when fine-tuned, the base's folder name ("Qwen3 · Qwen3-0.6B").
  QString model;
  // Lowercase UTF-8: name, notes, tags, status, backend, badges and every config leaf value
  // (numbers as JSON writes them, e.g. 0.0003), separated by newlines.
  std::string searchText;
};
RunEntry makeRunEntry(core::RunSummary summary, const nlohmann::json& config = nullptr);

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
    Accuracy,
    TokensPerS,
    PeakMemory,
    Techniques,
    Tags,
    Model,
    ColumnCount
  };
  // Qt::UserRole: the raw sort value (seconds, bytes, loss; missing values sort last).
  // BadgesRole (Techniques column): the badge labels as a QStringList.
  static constexpr int BadgesRole = Qt::UserRole + 1;
  explicit RunsTableModel(QObject* parent = nullptr);

  // Runs without configs (no badges; search covers name, notes, tags, status).
  void setRuns(std::vector<core::RunSummary> runs);
  void setEntries(std::vector<RunEntry> entries);
  // Every whitespace-separated word must occur (case-insensitively) in the run's search text
  // (see RunEntry); empty = all. Typing more of a word only re-checks the rows still shown.
  void setSearchText(const QString& text);
  void setStatusFilter(const QString& status);  // empty = all
  const QString& searchText() const { return search_; }
  int totalRuns() const { return static_cast<int>(all_.size()); }
  const core::RunSummary* run(int row) const;
  int rowsWithStatus(const std::string& status) const;  // among the rows shown
  const RunEntry* entry(int row) const;
  int rowOfRun(int64_t id) const;  // -1 when filtered out or unknown
  // Ids of every run (shown or filtered out) whose status is `running`.
  std::vector<int64_t> runningRuns() const;
  // Newer summaries of runs already listed (steps, loss, status of running ones): the badges
  // and search text stay, the order follows the sort column. Unknown ids are ignored.
  void updateSummaries(std::vector<core::RunSummary> summaries);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;
  void sort(int column, Qt::SortOrder order = Qt::AscendingOrder) override;
  int sortColumn() const { return sortColumn_; }
  Qt::SortOrder sortOrder() const { return sortOrder_; }

 private:
  bool matches(const RunEntry& e) const;
  void resort();                  // all_ -> sorted_ by the sort column
  void refilter(bool narrowing);  // sorted_ (or, narrowing, rows_) -> rows_

  std::vector<RunEntry> all_;
  std::vector<int> sorted_;  // every index into all_, in sort order
  std::vector<int> rows_;    // the shown subset of sorted_, in order
  QString search_, status_;
  std::vector<std::string> words_;  // lowercase search words
  int sortColumn_ = Started;
  Qt::SortOrder sortOrder_ = Qt::DescendingOrder;
};

// Runs every database call of the Runs page on a worker thread, one at a time, and reports
// the outcome with a message fit for a status bar.
class RunsBrowser : public QObject {
  Q_OBJECT
 public:
  RunsBrowser(RunRepository repo, RunsTableModel* model, QObject* parent = nullptr);
  // Two phases: loaded(n) when the summaries are in the table, detailsLoaded(n) when the
  // configs (technique badges, config-value search) are. busy() until both are done.
  void reload();
  void rename(int64_t id, const QString& name);
  void setTags(int64_t id, const QStringList& tags);
  void setNotes(int64_t id, const QString& notes);
  void deleteRun(int64_t id, bool deleteFiles);
  enum class ExportFormat { Csv, Json };
  void exportMetrics(int64_t id, const QString& path, ExportFormat format);
  // Chrome trace JSON of the run's `kernels` events (as `runs export --format trace`); a run
  // without a profile is an error saying so.
  void exportTrace(int64_t id, const QString& path);
  // Looks up the run's last checkpoint and whether it was profiled; extrasReady(id) follows
  // and extras(id) answers from then on (until the next reload).
  void fetchExtras(int64_t id);
  // Re-reads the runs listed as running (one query each, on the worker) and updates their
  // rows in place; runningRefreshed() follows. Skipped while another refresh is under way.
  void refreshRunning();
  std::optional<RunRepository::RunExtras> extras(int64_t id) const;
  bool busy() const { return busy_ > 0; }

 signals:
  void loaded(int runs);
  void detailsLoaded(int runs);
  void extrasReady(qint64 id);
  void runningRefreshed(int runs);
  // ok = false: message says what failed (naming the file / run).
  void done(bool ok, const QString& message);

 private:
  void edit(std::function<QString(RunRepository&)> op, QString okMessage, bool reloadAfter);
  RunRepository repo_;
  RunsTableModel* model_;
  int busy_ = 0;
  int reloadGeneration_ = 0, detailsGeneration_ = 0;
  std::map<int64_t, RunRepository::RunExtras> extras_;
  std::set<int64_t> fetching_;
  bool refreshingRunning_ = false;
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
