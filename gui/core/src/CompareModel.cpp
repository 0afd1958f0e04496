#include "trainscope/gui/CompareModel.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <QFutureWatcher>
#include <QLocale>
#include <QtConcurrent/QtConcurrentRun>

#include "trainscope/core/plan/Estimator.h"
#include "trainscope/gui/NumberFormat.h"

namespace ts::gui {

namespace {

QString labelOf(const CompareRun& r) {
  return QStringLiteral("#%1 %2").arg(r.detail.id).arg(QString::fromStdString(r.detail.name));
}
// Column headers: id over name, so a long name does not make the column wide.
QString headerOf(const CompareRun& r) {
  return QStringLiteral("#%1\n%2").arg(r.detail.id).arg(QString::fromStdString(r.detail.name));
}

QString bytesText(int64_t b) {
  return QString::fromStdString(core::formatBytes(double(b)));
}

QString countText(double v) {
  if (std::abs(v) >= 1e9) return QString::number(v / 1e9, 'f', 2) + " G";
  if (std::abs(v) >= 1e6) return QString::number(v / 1e6, 'f', 2) + " M";
  if (std::abs(v) >= 1e4) return QString::number(v / 1e3, 'f', 1) + " K";
  return QLocale().toString(v, 'f', 0);
}

// Linear interpolation of anchors' field at `step` (clamped at the ends); nullopt when no
// anchor has the field.
template <class Get>
std::optional<double> interpolate(const std::vector<StepAnchor>& a, double step, Get get) {
  const size_t lo = static_cast<size_t>(
      std::lower_bound(a.begin(), a.end(), step,
                       [](const StepAnchor& x, double s) { return double(x.step) < s; }) -
      a.begin());
  // The nearest anchors at or after / before `step` that have the field.
  const StepAnchor* next = nullptr;
  const StepAnchor* prev = nullptr;
  for (size_t k = lo; k < a.size() && !next; ++k)
    if (get(a[k])) next = &a[k];
  for (size_t k = lo; k-- > 0 && !prev;)
    if (get(a[k])) prev = &a[k];
  if (!prev && !next) return std::nullopt;
  if (!prev || (next && double(next->step) == step)) return *get(*next);
  if (!next) return *get(*prev);
  const double t = (step - double(prev->step)) / double(next->step - prev->step);
  return *get(*prev) + t * (*get(*next) - *get(*prev));
}

CompareMemory memoryOf(const std::vector<core::MemorySampleRow>& rows) {
  CompareMemory m;
  // Measured: per (seq, rank) device and host sums; the rank with the largest device sum.
  std::map<std::pair<int64_t, int>, int64_t> deviceSum, hostSum;
  int64_t lastPlan = -1;
  for (const auto& r : rows) {
    if (r.planned) {
      lastPlan = std::max(lastPlan, r.seq);
      continue;
    }
    if (r.tier == "device") deviceSum[{r.seq, r.rank}] += r.peak;
    if (r.tier == "host") hostSum[{r.seq, r.rank}] += r.peak;
  }
  int64_t best = -1;
  for (const auto& [k, v] : deviceSum)
    if (v > best) {
      best = v;
      m.rank = k.second;
    }
  m.haveMeasured = best >= 0;
  if (!m.haveMeasured && lastPlan >= 0) {
    // No measurement: show the plan's largest rank.
    std::map<int, int64_t> planned;
    for (const auto& r : rows)
      if (r.planned && r.seq == lastPlan && r.tier == "device") planned[r.rank] += r.peak;
    int64_t top = -1;
    for (const auto& [rank, v] : planned)
      if (v > top) top = v, m.rank = rank;
  }
  if (m.haveMeasured) {
    m.measuredTotal = best;
    for (const auto& [k, v] : hostSum)
      if (k.second == m.rank) m.measuredHost = std::max(m.measuredHost, v);
  }
  for (const auto& r : rows) {
    if (r.rank != m.rank) continue;
    const auto cat = core::memoryCategoryFromString(r.category);
    if (r.planned && r.seq == lastPlan) {
      m.havePredicted = true;
      if (r.tier == "device" && cat) {
        m.predicted[static_cast<int>(*cat)] += r.peak;
        m.predictedTotal += r.peak;
      } else if (r.tier == "host") {
        m.predictedHost += r.peak;
      }
    } else if (!r.planned && r.tier == "device" && cat) {
      auto& v = m.measured[static_cast<int>(*cat)];
      v = std::max(v, r.peak);
    }
  }
  return m;
}

std::vector<core::MetricPoint> pointsOf(core::RunStore& st, int64_t id, core::MetricColumn c,
                                        int maxPoints, bool* downsampled = nullptr) {
  auto s = st.metrics(id, c, maxPoints);
  if (downsampled) *downsampled = s.downsampled;
  return std::move(s.points);
}

}  // namespace

QString formatCompareDuration(double s) {
  if (s < 0 || !std::isfinite(s)) return QStringLiteral("—");
  const qint64 t = static_cast<qint64>(s + 0.5);
  if (t < 60) return QStringLiteral("%1 s").arg(t);
  if (t < 3600) return QStringLiteral("%1 min %2 s").arg(t / 60).arg(t % 60);
  return QStringLiteral("%1 h %2 min").arg(t / 3600).arg((t % 3600) / 60);
}

// ---- loading ------------------------------------------------------------------------------

CompareData CompareModel::fetch(const RunRepository& repo, const std::vector<int64_t>& ids,
                                int maxPoints, QString* error) {
  CompareData data;
  if (ids.size() < 2) {
    if (error) *error = QStringLiteral("Select at least two runs to compare");
    return data;
  }
  const bool ok = repo.withStore(
      [&](core::RunStore& st) {
        auto cmp = st.compare(ids);  // throws, naming the run, for an unknown id
        data.differences = std::move(cmp.configDifferences);
        for (auto& detail : cmp.runs) {
          CompareRun r;
          r.detail = std::move(detail);
          const int64_t id = r.detail.id;
          bool downsampled = false;
          r.loss = pointsOf(st, id, core::MetricColumn::Loss, maxPoints, &downsampled);
          r.lr = pointsOf(st, id, core::MetricColumn::Lr, maxPoints);
          r.tokensPerS = pointsOf(st, id, core::MetricColumn::TokensPerS, maxPoints);
          double sum = 0;
          int64_t n = 0;
          for (const auto& p : r.tokensPerS) {
            sum += p.mean * double(p.count);
            n += p.count;
          }
          if (n > 0) r.meanTokensPerS = sum / double(n);
          for (const auto& e : st.evals(id))
            if (e.loss) r.evals.emplace_back(e.step, *e.loss);

          // Anchors: every step when the curve is not downsampled, else each bucket's ends
          // (point lookups on the (run, step) key), so a 1,000,000-step run costs ~2 per bucket.
          std::vector<core::StepRow> rows;
          if (!downsampled) {
            rows = st.steps(id);
          } else {
            std::set<int64_t> steps;
            for (const auto* series : {&r.loss, &r.lr, &r.tokensPerS})
              for (const auto& p : *series) {
                steps.insert(p.firstStep);
                steps.insert(p.lastStep);
              }
            for (const auto& e : r.evals) steps.insert(e.first);
            for (int64_t s : steps)
              for (auto& row : st.steps(id, s, s)) rows.push_back(std::move(row));
          }
          double t0 = r.detail.started;
          if (t0 <= 0 && !rows.empty()) t0 = rows.front().time;
          for (const auto& row : rows) {
            StepAnchor a;
            a.step = row.step;
            if (row.tokens) a.tokens = double(*row.tokens);
            a.seconds = row.time - t0;
            r.anchors.push_back(a);
          }
          std::sort(r.anchors.begin(), r.anchors.end(),
                    [](const auto& a, const auto& b) { return a.step < b.step; });
          for (auto it = r.anchors.rbegin(); it != r.anchors.rend() && !r.finalTokens; ++it)
            r.finalTokens = it->tokens;
          const double end = r.detail.finished > 0 ? r.detail.finished : r.detail.heartbeat;
          if (r.detail.started > 0 && end >= r.detail.started)
            r.wallSeconds = end - r.detail.started;
          r.memory = memoryOf(st.memorySamples(id, true));
          data.runs.push_back(std::move(r));
        }
      },
      error);
  if (!ok) data = {};
  return data;
}

CompareModel::CompareModel(RunRepository repo, QObject* parent)
    : QObject(parent), repo_(std::move(repo)) {}

void CompareModel::load(const QList<qint64>& ids, int maxPoints) {
  const int gen = ++generation_;
  ++pending_;
  struct Result {
    CompareData data;
    QString error;
  };
  auto* w = new QFutureWatcher<Result>(this);
  connect(w, &QFutureWatcher<Result>::finished, this, [this, w, gen] {
    Result r = w->result();
    w->deleteLater();
    --pending_;
    if (gen != generation_) return;  // superseded by a newer selection
    if (!r.error.isEmpty()) {
      emit failed(r.error);
      return;
    }
    setData(std::move(r.data));
    emit loaded();
  });
  std::vector<int64_t> v(ids.begin(), ids.end());
  const RunRepository repo = repo_;
  w->setFuture(QtConcurrent::run([repo, v, maxPoints] {
    Result r;
    r.data = fetch(repo, v, maxPoints, &r.error);
    return r;
  }));
}

void CompareModel::setData(CompareData data) {
  diff_.setData(nullptr);
  summary_.setData(nullptr);
  memory_.setData(nullptr);
  data_ = std::move(data);
  diff_.setData(&data_);
  summary_.setData(&data_);
  memory_.setData(&data_);
}

QString CompareModel::runLabel(int i) const {
  return i >= 0 && i < runCount() ? labelOf(run(i)) : QString();
}

std::optional<double> CompareModel::xAt(int i, double step, Axis axis) const {
  if (i < 0 || i >= runCount()) return std::nullopt;
  const auto& a = run(i).anchors;
  switch (axis) {
    case Axis::Step:
      return step;
    case Axis::Tokens:
      return interpolate(a, step, [](const StepAnchor& x) { return x.tokens; });
    case Axis::WallTime:
      return interpolate(a, step, [](const StepAnchor& x) { return std::optional(x.seconds); });
  }
  return std::nullopt;
}

CompareModel::Curve CompareModel::curve(int i, Metric metric, Axis axis) const {
  Curve c;
  if (i < 0 || i >= runCount()) return c;
  const CompareRun& r = run(i);
  if (metric == Metric::EvalLoss) {
    for (const auto& [step, loss] : r.evals)
      if (auto x = xAt(i, double(step), axis)) c.mean << QPointF(*x, loss);
    return c;
  }
  const auto& pts = metric == Metric::TrainLoss ? r.loss
                    : metric == Metric::Lr      ? r.lr
                                                : r.tokensPerS;
  c.mean.reserve(int(pts.size()));
  c.envelope.reserve(int(pts.size() * 2));
  for (const auto& p : pts) {
    const auto x = xAt(i, 0.5 * double(p.firstStep + p.lastStep), axis);
    if (!x) continue;
    c.mean << QPointF(*x, p.mean);
    c.envelope << QPointF(*x, p.min) << QPointF(*x, p.max);
  }
  return c;
}

// ---- config diff ------------------------------------------------------------------------

void ConfigDiffModel::setData(const CompareData* data) {
  beginResetModel();
  data_ = data;
  endResetModel();
}
int ConfigDiffModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() || !data_ ? 0 : static_cast<int>(data_->differences.size());
}
int ConfigDiffModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() || !data_ ? 0 : 1 + static_cast<int>(data_->runs.size());
}
QVariant ConfigDiffModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || !data_ || index.row() >= rowCount() || index.column() >= columnCount())
    return {};
  const auto& d = data_->differences[static_cast<size_t>(index.row())];
  if (index.column() == 0) {
    if (role == Qt::DisplayRole || role == Qt::UserRole) return QString::fromStdString(d.path);
    return {};
  }
  const size_t run = static_cast<size_t>(index.column() - 1);
  const nlohmann::json v = run < d.values.size() ? d.values[run] : nlohmann::json();
  if (role == Qt::UserRole) return QString::fromStdString(v.dump());
  if (role == Qt::ToolTipRole && v.is_null()) return QStringLiteral("not set in this run's config");
  if (role != Qt::DisplayRole) return {};
  if (v.is_null()) return QStringLiteral("—");
  if (v.is_string()) return QString::fromStdString(v.get<std::string>());
  return QString::fromStdString(v.dump());
}
QVariant ConfigDiffModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o != Qt::Horizontal || role != Qt::DisplayRole || !data_)
    return QAbstractTableModel::headerData(section, o, role);
  if (section == 0) return QStringLiteral("Setting");
  if (section - 1 < static_cast<int>(data_->runs.size()))
    return headerOf(data_->runs[static_cast<size_t>(section - 1)]);
  return {};
}

// ---- summary ----------------------------------------------------------------------------

void CompareSummaryModel::setData(const CompareData* data) {
  beginResetModel();
  data_ = data;
  endResetModel();
}
int CompareSummaryModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() || !data_ ? 0 : RowCount;
}
int CompareSummaryModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() || !data_ ? 0 : 1 + static_cast<int>(data_->runs.size());
}

namespace {
// Raw value of a summary row for one run; lower is better unless higherBetter.
std::optional<double> summaryValue(const CompareRun& r, int row) {
  const auto& d = r.detail;
  switch (row) {
    case CompareSummaryModel::Steps:
      return double(d.steps);
    case CompareSummaryModel::TokensSeen:
      return r.finalTokens;
    case CompareSummaryModel::MeanTokensPerS:
      return r.meanTokensPerS;
    case CompareSummaryModel::PeakMemory:
      return d.peakMemory > 0 ? std::optional<double>(double(d.peakMemory)) : std::nullopt;
    case CompareSummaryModel::FinalLoss:
      return d.lastLoss;
    case CompareSummaryModel::BestEvalLoss:
      return d.bestEvalLoss;
    case CompareSummaryModel::Accuracy:
      return d.accuracy;
    case CompareSummaryModel::WallTime:
      return r.wallSeconds >= 0 ? std::optional<double>(r.wallSeconds) : std::nullopt;
  }
  return std::nullopt;
}
}  // namespace

QVariant CompareSummaryModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || !data_ || index.row() >= rowCount() || index.column() >= columnCount())
    return {};
  const int row = index.row();
  if (index.column() == 0) {
    if (role != Qt::DisplayRole) return {};
    return headerData(row, Qt::Vertical, Qt::DisplayRole);
  }
  const CompareRun& r = data_->runs[static_cast<size_t>(index.column() - 1)];
  if (role == Qt::TextAlignmentRole) return int(Qt::AlignRight | Qt::AlignVCenter);
  if (row == Status) {
    if (role == Qt::DisplayRole || role == Qt::UserRole)
      return QString::fromStdString(r.detail.status);
    return {};
  }
  const auto v = summaryValue(r, row);
  if (role == Qt::UserRole) return v ? QVariant(*v) : QVariant();
  if (role == kCompareEmphasisRole && v && data_->runs.size() >= 2 && row != Steps &&
      row != TokensSeen) {
    // Bold the best run: fastest, smallest, lowest loss, most accurate, shortest. Judged on
    // the shown text read back, so runs that print the same value tie and none wins.
    const bool higher = row == MeanTokensPerS || row == Accuracy;
    auto shown = [&](const CompareRun& o) -> std::optional<double> {
      const auto w = summaryValue(o, row);
      if (!w) return std::nullopt;
      return row == WallTime || row == PeakMemory ? *w : shownValue(row, *w);
    };
    const double mine = *shown(r);
    bool best = true, allSame = true;
    for (const auto& o : data_->runs) {
      const auto w = shown(o);
      if (!w) continue;
      if (higher ? *w > mine : *w < mine) best = false;
      if (displayText(row, *summaryValue(o, row)) != displayText(row, *v)) allSame = false;
    }
    return best && !allSame;
  }
  if (role != Qt::DisplayRole) return {};
  if (!v) return QStringLiteral("—");
  return displayText(row, *v);
}

QString CompareSummaryModel::displayText(int row, double v) {
  switch (row) {
    case Steps:
      return QLocale().toString(qlonglong(v));
    case TokensSeen:
      return countText(v);
    case MeanTokensPerS:
      return QLocale().toString(v, 'f', 0);
    case PeakMemory:
      return bytesText(int64_t(v));
    case FinalLoss:
    case BestEvalLoss:
      return formatSignificant(v);
    case Accuracy:
      return formatAccuracy(v);
    case WallTime:
      return formatCompareDuration(v);
  }
  return {};
}

double CompareSummaryModel::shownValue(int row, double v) {
  if (row == Accuracy) return std::round(v * 1000.0);  // one decimal of a percentage
  bool ok = false;
  const double shown = QLocale().toDouble(displayText(row, v), &ok);
  if (ok) return shown;
  const double plain = displayText(row, v).toDouble(&ok);
  return ok ? plain : v;
}

QVariant CompareSummaryModel::headerData(int section, Qt::Orientation o, int role) const {
  if (role != Qt::DisplayRole || !data_) return QAbstractTableModel::headerData(section, o, role);
  if (o == Qt::Vertical) {
    switch (section) {
      case Status:
        return QStringLiteral("Status");
      case Steps:
        return QStringLiteral("Steps recorded");
      case TokensSeen:
        return QStringLiteral("Tokens seen");
      case MeanTokensPerS:
        return QStringLiteral("Tokens/s (mean)");
      case PeakMemory:
        return QStringLiteral("Peak memory / rank");
      case FinalLoss:
        return QStringLiteral("Final train loss");
      case BestEvalLoss:
        return QStringLiteral("Best eval loss");
      case Accuracy:
        return QStringLiteral("Exact-match accuracy");
      case WallTime:
        return QStringLiteral("Wall time");
    }
    return {};
  }
  if (section == 0) return QStringLiteral("Metric");
  if (section - 1 < static_cast<int>(data_->runs.size()))
    return headerOf(data_->runs[static_cast<size_t>(section - 1)]);
  return {};
}

// ---- memory -----------------------------------------------------------------------------

void CompareMemoryModel::setData(const CompareData* data) {
  beginResetModel();
  data_ = data;
  endResetModel();
}
int CompareMemoryModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() || !data_ ? 0 : core::kMemoryCategoryCount + 2;
}
int CompareMemoryModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() || !data_ ? 0 : 1 + 2 * static_cast<int>(data_->runs.size());
}

std::optional<int64_t> CompareMemoryModel::value(int row, int run, bool predicted) const {
  const CompareMemory& m = data_->runs[static_cast<size_t>(run)].memory;
  if (predicted ? !m.havePredicted : !m.haveMeasured) return std::nullopt;
  if (row < core::kMemoryCategoryCount) return (predicted ? m.predicted : m.measured)[row];
  if (row == kDeviceTotalRow) return predicted ? m.predictedTotal : m.measuredTotal;
  return predicted ? m.predictedHost : m.measuredHost;
}

QVariant CompareMemoryModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || !data_ || index.row() >= rowCount() || index.column() >= columnCount())
    return {};
  const int row = index.row();
  if (index.column() == 0) {
    if (role != Qt::DisplayRole) return {};
    if (row == kDeviceTotalRow) return QStringLiteral("Device total");
    if (row == kHostRow) return QStringLiteral("Host (offload)");
    QString name =
        QString::fromStdString(std::string(core::toString(static_cast<core::MemoryCategory>(row))));
    name.replace('_', ' ');
    name[0] = name[0].toUpper();
    return name;
  }
  const int run = (index.column() - 1) / 2;
  const bool predicted = (index.column() - 1) % 2 == 0;
  const auto v = value(row, run, predicted);
  if (role == Qt::UserRole) return v ? QVariant(qlonglong(*v)) : QVariant();
  if (role == Qt::TextAlignmentRole) return int(Qt::AlignRight | Qt::AlignVCenter);
  if (role == kCompareEmphasisRole) return row == kDeviceTotalRow;
  if (role == Qt::ToolTipRole)
    return QStringLiteral("%1, rank %2 (%3)")
        .arg(labelOf(data_->runs[static_cast<size_t>(run)]))
        .arg(data_->runs[static_cast<size_t>(run)].memory.rank)
        .arg(predicted ? "estimator's plan" : "highest measured peak");
  if (role != Qt::DisplayRole) return {};
  return v ? bytesText(*v) : QStringLiteral("—");
}

QVariant CompareMemoryModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o != Qt::Horizontal || role != Qt::DisplayRole || !data_)
    return QAbstractTableModel::headerData(section, o, role);
  if (section == 0) return QStringLiteral("Category");
  const int run = (section - 1) / 2;
  if (run >= static_cast<int>(data_->runs.size())) return {};
  // "#12 predicted" / "#12 measured" (rank N): the page's legend maps ids to names.
  return QStringLiteral("#%1 %2\nrank %3")
      .arg(data_->runs[static_cast<size_t>(run)].detail.id)
      .arg((section - 1) % 2 == 0 ? "predicted" : "measured")
      .arg(data_->runs[static_cast<size_t>(run)].memory.rank);
}

}  // namespace ts::gui
