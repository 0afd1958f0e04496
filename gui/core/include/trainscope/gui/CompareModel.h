#pragma once
// Run comparison (Compare page): two or more runs loaded from the run store on a worker thread
// (QtConcurrent) — downsampled train loss, lr and tokens/s (min/max/mean per bucket), evals,
// step -> (tokens seen, wall time) anchors for aligning the curves, config differences
// (RunStore::compare), predicted vs measured peak memory per category, and a summary. Three
// item models serve the tables; curve() gives chart points. Qt Core only; views only paint.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <QAbstractTableModel>
#include <QList>
#include <QObject>
#include <QPointF>
#include <QString>
#include <QVector>

#include "trainscope/core/plan/MemoryTable.h"
#include "trainscope/core/store/RunStore.h"
#include "trainscope/gui/RunRepository.h"

namespace ts::gui {

// Where a step sits in tokens seen and wall time (seconds since the run started).
struct StepAnchor {
  int64_t step = 0;
  std::optional<double> tokens;
  double seconds = 0;
};

// Peak memory of one rank by category (device tier), predicted by the estimator's plan and
// measured; the rank shown is the one with the highest measured device total.
struct CompareMemory {
  int rank = 0;
  bool havePredicted = false, haveMeasured = false;
  std::array<int64_t, core::kMemoryCategoryCount> predicted{}, measured{};
  int64_t predictedTotal = 0, measuredTotal = 0;  // device tier, at one time (not sum of peaks)
  int64_t predictedHost = 0, measuredHost = 0;    // host tier (offload), total peak
};

struct CompareRun {
  core::RunDetail detail;
  std::vector<core::MetricPoint> loss, lr, tokensPerS;  // downsampled buckets
  std::vector<std::pair<int64_t, double>> evals;        // (step, eval loss)
  std::vector<StepAnchor> anchors;                      // sorted by step
  std::optional<double> meanTokensPerS;                 // over every recorded step
  std::optional<double> finalTokens;                    // tokens seen at the last step
  double wallSeconds = -1;                              // finished (or heartbeat) - started
  CompareMemory memory;
};

struct CompareData {
  std::vector<CompareRun> runs;
  std::vector<core::ConfigDifference> differences;  // only the leaves that differ
};

// Item-data role of the summary and memory tables: true where the view should emphasise the
// cell (the best run of a summary row; the device total). Qt Core has no QFont, so views bold.
inline constexpr int kCompareEmphasisRole = Qt::UserRole + 1;

// Rows: the differing config leaves (dotted path); columns: "Setting", then one per run.
// Qt::UserRole on a value cell: the JSON text (null = absent).
class ConfigDiffModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  using QAbstractTableModel::QAbstractTableModel;
  void setData(const CompareData* data);
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;

 private:
  const CompareData* data_ = nullptr;
};

// Rows: the summary metrics (enum Row); columns: "Metric", then one per run. Qt::UserRole on
// a value cell: the raw number (seconds, bytes, loss, tokens/s), invalid when unknown;
// kCompareEmphasisRole: true for the best run (fastest, smallest, lowest loss, most accurate,
// shortest), judged on the values as shown: no run is emphasised where all show the same.
class CompareSummaryModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Row {
    Status,
    Steps,
    TokensSeen,
    MeanTokensPerS,
    PeakMemory,
    FinalLoss,
    BestEvalLoss,
    Accuracy,
    WallTime,
    RowCount
  };
  using QAbstractTableModel::QAbstractTableModel;
  void setData(const CompareData* data);
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;
  // The text of a row's value, and that text read back as a number (what "equal" means).
  static QString displayText(int row, double v);
  static double shownValue(int row, double v);

 private:
  const CompareData* data_ = nullptr;
};

// Rows: the five categories, then "device total" and "host (offload)"; columns: "Category",
// then (predicted, measured) per run. Qt::UserRole: bytes, invalid when not recorded.
class CompareMemoryModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  static constexpr int kDeviceTotalRow = core::kMemoryCategoryCount;
  static constexpr int kHostRow = core::kMemoryCategoryCount + 1;
  using QAbstractTableModel::QAbstractTableModel;
  void setData(const CompareData* data);
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;

 private:
  std::optional<int64_t> value(int row, int run, bool predicted) const;
  const CompareData* data_ = nullptr;
};

class CompareModel : public QObject {
  Q_OBJECT
 public:
  enum class Metric { TrainLoss, EvalLoss, Lr, TokensPerS };
  enum class Axis { Step, Tokens, WallTime };
  struct Curve {
    QVector<QPointF> mean;      // one point per bucket (eval: per eval)
    QVector<QPointF> envelope;  // (x, min), (x, max) per bucket: spikes inside a bucket
  };

  explicit CompareModel(RunRepository repo, QObject* parent = nullptr);

  // Loads on a worker; loaded() or failed(message) follows. A newer load supersedes an older
  // one still running. Fewer than two ids is an error.
  void load(const QList<qint64>& ids, int maxPoints = 1000);
  bool loading() const { return pending_ > 0; }
  // The worker's body, callable directly (tests, benchmarks).
  static CompareData fetch(const RunRepository& repo, const std::vector<int64_t>& ids,
                           int maxPoints, QString* error);
  void setData(CompareData data);
  const CompareData& compareData() const { return data_; }

  int runCount() const { return static_cast<int>(data_.runs.size()); }
  const CompareRun& run(int i) const { return data_.runs.at(static_cast<size_t>(i)); }
  QString runLabel(int i) const;  // "#12 name"
  // x of a step on the axis (steps; tokens; seconds since start); nullopt when the run did
  // not record what the axis needs (e.g. no token counts).
  std::optional<double> xAt(int run, double step, Axis axis) const;
  Curve curve(int run, Metric metric, Axis axis) const;

  ConfigDiffModel* diffModel() { return &diff_; }
  CompareSummaryModel* summaryModel() { return &summary_; }
  CompareMemoryModel* memoryModel() { return &memory_; }

 signals:
  void loaded();
  void failed(const QString& message);

 private:
  RunRepository repo_;
  CompareData data_;
  ConfigDiffModel diff_;
  CompareSummaryModel summary_;
  CompareMemoryModel memory_;
  int generation_ = 0;
  int pending_ = 0;
};

// Shared by the Compare page: "1.50 GiB", "12.3 K", "4 min 10 s".
QString formatCompareDuration(double seconds);

}  // namespace ts::gui
