#include "trainscope/gui/RunsTableModel.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include <QDateTime>
#include <QFile>
#include <QFutureWatcher>
#include <QtConcurrent/QtConcurrentRun>

#include "trainscope/core/Estimator.h"

namespace ts::gui {

namespace {

double durationOf(const core::RunSummary& r) {
  if (r.started <= 0) return -1;
  const double end = r.finished > 0 ? r.finished : r.heartbeat;
  return end >= r.started ? end - r.started : -1;
}

QString tagsText(const core::RunSummary& r) {
  QStringList l;
  for (const auto& t : r.tags) l << QString::fromStdString(t);
  return l.join(", ");
}

QString durationText(double s) {
  if (s < 0) return QStringLiteral("—");
  const qint64 t = static_cast<qint64>(s + 0.5);
  if (t < 60) return QStringLiteral("%1 s").arg(t);
  if (t < 3600) return QStringLiteral("%1 min %2 s").arg(t / 60).arg(t % 60);
  return QStringLiteral("%1 h %2 min").arg(t / 3600).arg((t % 3600) / 60);
}

QString optText(const std::optional<double>& v, int decimals) {
  return v ? QString::number(*v, 'f', decimals) : QStringLiteral("—");
}

// Sort key: (missing, value) so missing values sort after present ones in both orders.
struct Key {
  bool missing = false;
  double num = 0;
  QString text;
  bool isText = false;
};

Key keyOf(const core::RunSummary& r, int column) {
  Key k;
  auto opt = [&](const std::optional<double>& v) {
    k.missing = !v;
    k.num = v.value_or(0);
  };
  switch (column) {
    case RunsTableModel::Id:
      k.num = double(r.id);
      break;
    case RunsTableModel::Name:
      k.isText = true;
      k.text = QString::fromStdString(r.name);
      break;
    case RunsTableModel::Status:
      k.isText = true;
      k.text = QString::fromStdString(r.status);
      break;
    case RunsTableModel::Started:
      k.missing = r.started <= 0;
      k.num = r.started;
      break;
    case RunsTableModel::Duration:
      k.num = durationOf(r);
      k.missing = k.num < 0;
      break;
    case RunsTableModel::Steps:
      k.num = double(std::max<int64_t>(r.lastStep, -1));
      break;
    case RunsTableModel::FinalLoss:
      opt(r.lastLoss);
      break;
    case RunsTableModel::BestEvalLoss:
      opt(r.bestEvalLoss);
      break;
    case RunsTableModel::TokensPerS:
      opt(r.tokensPerS);
      break;
    case RunsTableModel::PeakMemory:
      k.missing = r.peakMemory <= 0;
      k.num = double(r.peakMemory);
      break;
    case RunsTableModel::Tags:
      k.isText = true;
      k.text = tagsText(r);
      k.missing = r.tags.empty();
      break;
  }
  return k;
}

}  // namespace

RunsTableModel::RunsTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void RunsTableModel::setRuns(std::vector<core::RunSummary> runs) {
  beginResetModel();
  all_ = std::move(runs);
  rebuild();
  endResetModel();
}

void RunsTableModel::setSearchText(const QString& text) {
  if (text == search_) return;
  beginResetModel();
  search_ = text;
  rebuild();
  endResetModel();
}

void RunsTableModel::setStatusFilter(const QString& status) {
  if (status == status_) return;
  beginResetModel();
  status_ = status;
  rebuild();
  endResetModel();
}

bool RunsTableModel::matches(const core::RunSummary& r) const {
  if (!status_.isEmpty() && QString::fromStdString(r.status) != status_) return false;
  if (search_.isEmpty()) return true;
  const QString s = search_.trimmed();
  return QString::fromStdString(r.name).contains(s, Qt::CaseInsensitive) ||
         QString::fromStdString(r.notes).contains(s, Qt::CaseInsensitive) ||
         tagsText(r).contains(s, Qt::CaseInsensitive);
}

void RunsTableModel::rebuild() {
  rows_.clear();
  for (int i = 0; i < static_cast<int>(all_.size()); ++i)
    if (matches(all_[i])) rows_.push_back(i);
  const int col = sortColumn_;
  const bool desc = sortOrder_ == Qt::DescendingOrder;
  std::vector<Key> keys(all_.size());
  for (int i : rows_) keys[i] = keyOf(all_[i], col);
  std::stable_sort(rows_.begin(), rows_.end(), [&](int a, int b) {
    const Key& x = keys[a];
    const Key& y = keys[b];
    if (x.missing != y.missing) return y.missing;  // missing last either way
    int c = 0;
    if (x.isText)
      c = QString::compare(x.text, y.text, Qt::CaseInsensitive);
    else
      c = x.num < y.num ? -1 : (x.num > y.num ? 1 : 0);
    if (c == 0) return all_[a].id > all_[b].id;  // newest first among equals: stable view
    return desc ? c > 0 : c < 0;
  });
}

void RunsTableModel::sort(int column, Qt::SortOrder order) {
  if (column < 0 || column >= ColumnCount) return;
  emit layoutAboutToBeChanged({}, QAbstractItemModel::VerticalSortHint);
  const QModelIndexList before = persistentIndexList();
  std::vector<int64_t> ids;
  for (const auto& i : before) ids.push_back(run(i.row()) ? run(i.row())->id : 0);
  sortColumn_ = column;
  sortOrder_ = order;
  rebuild();
  QModelIndexList after;
  for (size_t k = 0; k < ids.size(); ++k) {
    const int r = rowOfRun(ids[k]);
    after << (r < 0 ? QModelIndex() : index(r, before[k].column()));
  }
  changePersistentIndexList(before, after);
  emit layoutChanged({}, QAbstractItemModel::VerticalSortHint);
}

const core::RunSummary* RunsTableModel::run(int row) const {
  return row >= 0 && row < static_cast<int>(rows_.size()) ? &all_[rows_[row]] : nullptr;
}

int RunsTableModel::rowOfRun(int64_t id) const {
  for (int r = 0; r < static_cast<int>(rows_.size()); ++r)
    if (all_[rows_[r]].id == id) return r;
  return -1;
}

int RunsTableModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(rows_.size());
}
int RunsTableModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant RunsTableModel::data(const QModelIndex& index, int role) const {
  const core::RunSummary* r = index.isValid() ? run(index.row()) : nullptr;
  if (!r || index.column() >= ColumnCount) return {};
  const int c = index.column();
  if (role == Qt::TextAlignmentRole)
    return int(
        (c == Name || c == Status || c == Tags || c == Started ? Qt::AlignLeft : Qt::AlignRight) |
        Qt::AlignVCenter);
  if (role == Qt::ToolTipRole) {
    QString t = QString::fromStdString(r->name);
    if (!r->reason.empty()) t += "\n" + QString::fromStdString(r->reason);
    if (!r->notes.empty()) t += "\n\n" + QString::fromStdString(r->notes);
    return t;
  }
  if (role == Qt::UserRole) {
    const Key k = keyOf(*r, c);
    if (k.missing) return {};
    return k.isText ? QVariant(k.text) : QVariant(k.num);
  }
  if (role != Qt::DisplayRole) return {};
  switch (c) {
    case Id:
      return qlonglong(r->id);
    case Name:
      return QString::fromStdString(r->name);
    case Status:
      return QString::fromStdString(r->status);
    case Started:
      return r->started > 0 ? QDateTime::fromMSecsSinceEpoch(qint64(r->started * 1000))
                                  .toString("yyyy-MM-dd HH:mm")
                            : QStringLiteral("—");
    case Duration:
      return durationText(durationOf(*r));
    case Steps:
      return qlonglong(r->lastStep >= 0 ? r->lastStep : 0);
    case FinalLoss:
      return optText(r->lastLoss, 4);
    case BestEvalLoss:
      return optText(r->bestEvalLoss, 4);
    case TokensPerS:
      return r->tokensPerS ? QLocale().toString(*r->tokensPerS, 'f', 0) : QStringLiteral("—");
    case PeakMemory:
      return r->peakMemory > 0 ? QString::fromStdString(core::formatBytes(double(r->peakMemory)))
                               : QStringLiteral("—");
    case Tags:
      return tagsText(*r);
  }
  return {};
}

QVariant RunsTableModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o != Qt::Horizontal || role != Qt::DisplayRole)
    return QAbstractTableModel::headerData(section, o, role);
  switch (section) {
    case Id:
      return "#";
    case Name:
      return "Name";
    case Status:
      return "Status";
    case Started:
      return "Started";
    case Duration:
      return "Duration";
    case Steps:
      return "Steps";
    case FinalLoss:
      return "Final loss";
    case BestEvalLoss:
      return "Best eval loss";
    case TokensPerS:
      return "Tokens/s";
    case PeakMemory:
      return "Peak memory";
    case Tags:
      return "Tags";
  }
  return {};
}

// ---- exports ------------------------------------------------------------------------------

namespace {
std::string csvNum(const std::optional<double>& v) {
  if (!v) return "";
  std::ostringstream o;
  o << std::setprecision(17) << *v;
  return o.str();
}
QString writeAll(const QString& path, const std::string& data) {
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate))
    return QStringLiteral("Cannot write %1: %2").arg(path, f.errorString());
  if (f.write(data.data(), qint64(data.size())) != qint64(data.size()))
    return QStringLiteral("Cannot write %1: %2").arg(path, f.errorString());
  return {};
}
}  // namespace

QString writeMetricsCsv(const core::RunDetail&, const std::vector<core::StepRow>& steps,
                        const QString& path) {
  std::ostringstream out;
  out << "step,time,loss,lr,grad_norm,loss_scale,tokens,tokens_per_s,step_ms,skipped\n";
  for (const auto& s : steps)
    out << s.step << "," << csvNum(s.time) << "," << csvNum(s.loss) << "," << csvNum(s.lr) << ","
        << csvNum(s.gradNorm) << "," << csvNum(s.lossScale) << ","
        << (s.tokens ? std::to_string(*s.tokens) : "") << "," << csvNum(s.tokensPerS) << ","
        << csvNum(s.stepMs) << "," << (s.skipped ? 1 : 0) << "\n";
  return writeAll(path, out.str());
}

QString writeMetricsJson(const core::RunDetail& r, const std::vector<core::StepRow>& steps,
                         const std::vector<core::EvalRow>& evals, const QString& path) {
  using nlohmann::json;
  auto opt = [](const auto& v) { return v ? json(*v) : json(nullptr); };
  json run = {{"id", r.id},
              {"name", r.name},
              {"status", r.status},
              {"tags", r.tags},
              {"notes", r.notes},
              {"started", r.started},
              {"finished", r.finished},
              {"steps", r.steps},
              {"last_loss", opt(r.lastLoss)},
              {"best_eval_loss", opt(r.bestEvalLoss)},
              {"tokens_per_s", opt(r.tokensPerS)},
              {"peak_memory", r.peakMemory}};
  json j = {{"run", run}, {"config", r.config}};
  json rows = json::array();
  for (const auto& s : steps)
    rows.push_back({{"step", s.step},
                    {"time", s.time},
                    {"loss", opt(s.loss)},
                    {"lr", opt(s.lr)},
                    {"grad_norm", opt(s.gradNorm)},
                    {"loss_scale", opt(s.lossScale)},
                    {"tokens", opt(s.tokens)},
                    {"tokens_per_s", opt(s.tokensPerS)},
                    {"step_ms", opt(s.stepMs)},
                    {"skipped", s.skipped}});
  j["metrics"] = rows;
  json evs = json::array();
  for (const auto& e : evals) evs.push_back(e.body);
  j["evals"] = evs;
  return writeAll(path, j.dump(1) + "\n");
}

// ---- RunsBrowser ----------------------------------------------------------------------------

RunsBrowser::RunsBrowser(RunRepository repo, RunsTableModel* model, QObject* parent)
    : QObject(parent), repo_(std::move(repo)), model_(model) {}

void RunsBrowser::reload() {
  struct Result {
    std::vector<core::RunSummary> runs;
    QString error;
  };
  ++busy_;
  auto* w = new QFutureWatcher<Result>(this);
  connect(w, &QFutureWatcher<Result>::finished, this, [this, w] {
    Result r = w->result();
    w->deleteLater();
    --busy_;
    if (!r.error.isEmpty()) {
      emit done(false, r.error);
      return;
    }
    const int n = static_cast<int>(r.runs.size());
    model_->setRuns(std::move(r.runs));
    emit loaded(n);
  });
  const RunRepository repo = repo_;
  w->setFuture(QtConcurrent::run([repo] {
    Result r;
    r.runs = repo.listRuns(&r.error);
    return r;
  }));
}

void RunsBrowser::edit(std::function<QString(RunRepository&)> op, QString okMessage,
                       bool reloadAfter) {
  ++busy_;
  auto* w = new QFutureWatcher<QString>(this);
  connect(w, &QFutureWatcher<QString>::finished, this, [this, w, okMessage, reloadAfter] {
    const QString err = w->result();
    w->deleteLater();
    --busy_;
    emit done(err.isEmpty(), err.isEmpty() ? okMessage : err);
    if (reloadAfter) reload();
  });
  RunRepository repo = repo_;
  w->setFuture(QtConcurrent::run([repo, op]() mutable { return op(repo); }));
}

void RunsBrowser::rename(int64_t id, const QString& name) {
  const std::string n = name.trimmed().toStdString();
  edit([id, n](RunRepository& r) { return r.rename(id, n); },
       QStringLiteral("Run %1 renamed").arg(id), true);
}

void RunsBrowser::setTags(int64_t id, const QStringList& tags) {
  std::vector<std::string> t;
  for (const auto& s : tags)
    if (!s.trimmed().isEmpty()) t.push_back(s.trimmed().toStdString());
  edit([id, t](RunRepository& r) { return r.setTags(id, t); },
       QStringLiteral("Tags of run %1 saved").arg(id), true);
}

void RunsBrowser::setNotes(int64_t id, const QString& notes) {
  const std::string n = notes.toStdString();
  edit([id, n](RunRepository& r) { return r.setNotes(id, n); },
       QStringLiteral("Notes of run %1 saved").arg(id), true);
}

void RunsBrowser::deleteRun(int64_t id, bool deleteFiles) {
  edit([id, deleteFiles](RunRepository& r) { return r.deleteRun(id, deleteFiles); },
       QStringLiteral("Run %1 deleted").arg(id), true);
}

void RunsBrowser::exportMetrics(int64_t id, const QString& path, ExportFormat format) {
  edit(
      [id, path, format](RunRepository& r) -> QString {
        QString err;
        auto detail = r.getRun(id, &err);
        if (!detail) return err.isEmpty() ? QStringLiteral("Run %1 not found").arg(id) : err;
        auto steps = r.steps(id, 0, &err);
        if (!err.isEmpty()) return err;
        if (format == ExportFormat::Csv) return writeMetricsCsv(*detail, steps, path);
        auto evals = r.evals(id, &err);
        if (!err.isEmpty()) return err;
        return writeMetricsJson(*detail, steps, evals, path);
      },
      QStringLiteral("Metrics of run %1 exported to %2").arg(id).arg(path), false);
}

}  // namespace ts::gui
