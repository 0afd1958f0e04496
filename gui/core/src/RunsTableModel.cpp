#include "trainscope/gui/RunsTableModel.h"

#include "trainscope/core/model/ModelFamily.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include <QDateTime>
#include <QFile>
#include <QFutureWatcher>
#include <QRegularExpression>
#include <QtConcurrent/QtConcurrentRun>

#include "trainscope/core/plan/Estimator.h"
#include "trainscope/gui/NumberFormat.h"
#include "trainscope/profiler/ChromeTrace.h"

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

QString lossText(const std::optional<double>& v) {
  return v ? formatSignificant(*v) : QStringLiteral("—");
}

// Sort key: (missing, value) so missing values sort after present ones in both orders.
struct Key {
  bool missing = false;
  double num = 0;
  QString text;
  bool isText = false;
};

Key keyOf(const RunEntry& e, int column) {
  const core::RunSummary& r = e.summary;
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
    case RunsTableModel::Accuracy:
      opt(r.accuracy);
      break;
    case RunsTableModel::TokensPerS:
      opt(r.tokensPerS);
      break;
    case RunsTableModel::PeakMemory:
      k.missing = r.peakMemory <= 0;
      k.num = double(r.peakMemory);
      break;
    case RunsTableModel::Techniques:
      k.isText = true;
      k.text = e.badges.join(' ');
      k.missing = e.badges.isEmpty();
      break;
    case RunsTableModel::Tags:
      k.isText = true;
      k.text = tagsText(r);
      k.missing = r.tags.empty();
      break;
    case RunsTableModel::Model:
      k.isText = true;
      k.text = e.model;
      k.missing = e.model.isEmpty();
      break;
  }
  return k;
}

}  // namespace

// ---- badges and search text -------------------------------------------------------------

namespace {

const nlohmann::json* at(const nlohmann::json& j, const char* a, const char* b) {
  if (!j.is_object()) return nullptr;
  auto i = j.find(a);
  if (i == j.end() || !i->is_object()) return nullptr;
  auto k = i->find(b);
  return k == i->end() ? nullptr : &*k;
}
std::string textAt(const nlohmann::json& j, const char* a, const char* b) {
  const auto* v = at(j, a, b);
  return v && v->is_string() ? v->get<std::string>() : std::string();
}
double numAt(const nlohmann::json& j, const char* a, const char* b) {
  const auto* v = at(j, a, b);
  return v && v->is_number() ? v->get<double>() : 0.0;
}
bool on(const std::string& v) {
  return !v.empty() && v != "none";
}

void appendLower(std::string& out, std::string_view s) {
  out.reserve(out.size() + s.size() + 1);
  for (char c : s) out.push_back(c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c);
  out.push_back('\n');
}

void appendLeaves(std::string& out, const nlohmann::json& j) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) appendLeaves(out, v);
  } else if (j.is_array()) {
    for (const auto& v : j) appendLeaves(out, v);
  } else if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    if (!s.empty()) appendLower(out, s);
  } else if (!j.is_null()) {
    appendLower(out, j.dump());
  }
}

// Lowercases ASCII only: config values and badges are ASCII, and a non-ASCII name still
// matches a search typed in the same case (a full Unicode fold would cost a QString per run).
std::vector<std::string> searchWords(const QString& text) {
  std::vector<std::string> words;
  for (const QString& w : text.toLower().split(QRegularExpression("\\s+"), Qt::SkipEmptyParts))
    words.push_back(w.toStdString());
  return words;
}

}  // namespace

QStringList techniqueBadges(const nlohmann::json& c) {
  QStringList b;
  if (!c.is_object()) return b;
  const std::string policy = textAt(c, "precision", "policy");
  if (policy == "bf16" || policy == "fp16" || policy == "fp8") b << QString::fromStdString(policy);
  if (policy == "pure_bf16") b << "pure bf16";
  if (on(textAt(c, "memory", "checkpointing"))) b << "ckpt";
  if (const int z = int(numAt(c, "parallel", "zero_stage")); z > 0)
    b << QStringLiteral("ZeRO-%1").arg(z);
  if (on(textAt(c, "parallel", "offload_optimizer")) || on(textAt(c, "parallel", "offload_params")))
    b << "offload";
  if (on(textAt(c, "memory", "activation_compression"))) b << "compress";
  if (textAt(c, "attention", "impl") == "flash") b << "flash";
  if (numAt(c, "train", "grad_accum") > 1) b << "accum";
  if (numAt(c, "optimizer", "state_bits") == 8) b << "8-bit opt";
  // Starts from weights (a checkpoint or a Hugging Face folder) rather than random ones.
  if (!textAt(c, "finetune", "base_checkpoint").empty()) b << "fine-tune";
  const auto* lora = at(c, "finetune", "lora");
  const bool loraOn = lora && lora->is_object() && lora->value("r", 0.0) > 0;
  if (loraOn) b << (textAt(c, "finetune", "base_quant") == "nf4" ? "QLoRA" : "LoRA");
  if (!textAt(c, "distill", "teacher_checkpoint").empty()) b << "distill";
  if (const auto* p = at(c, "profile", "enabled"); p && p->is_boolean() && p->get<bool>())
    b << "profile";
  return b;
}

QString modelLabel(const nlohmann::json& c) {
  const std::string arch = textAt(c, "model", "arch");
  const core::ModelFamily* f = core::findModelFamily(arch);
  QString out = QString::fromStdString(f ? f->displayName() : arch);
  std::string base = textAt(c, "finetune", "base_checkpoint");
  while (!base.empty() && base.back() == '/') base.pop_back();
  if (!base.empty()) {
    const auto slash = base.find_last_of('/');
    out += (out.isEmpty() ? "" : " · ") +
           QString::fromStdString(slash == std::string::npos ? base : base.substr(slash + 1));
  }
  return out;
}

RunEntry makeRunEntry(core::RunSummary summary, const nlohmann::json& config) {
  RunEntry e;
  e.badges = techniqueBadges(config);
  // A recorded kernel timeline, whether the config asked for it or "Profile now" did.
  if (summary.profiled) {
    e.badges.removeAll("profile");
    e.badges << "profiled";
  }
  e.model = modelLabel(config);
  std::string& t = e.searchText;
  appendLower(t, summary.name);
  appendLower(t, summary.notes);
  for (const auto& tag : summary.tags) appendLower(t, tag);
  appendLower(t, summary.status);
  appendLower(t, summary.backend);
  for (const auto& b : e.badges) appendLower(t, b.toStdString());
  appendLeaves(t, config);
  e.summary = std::move(summary);
  return e;
}

// ---- model -------------------------------------------------------------------------------

RunsTableModel::RunsTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void RunsTableModel::setRuns(std::vector<core::RunSummary> runs) {
  std::vector<RunEntry> entries;
  entries.reserve(runs.size());
  for (auto& r : runs) entries.push_back(makeRunEntry(std::move(r)));
  setEntries(std::move(entries));
}

void RunsTableModel::setEntries(std::vector<RunEntry> entries) {
  beginResetModel();
  all_ = std::move(entries);
  resort();
  refilter(false);
  endResetModel();
}

void RunsTableModel::setSearchText(const QString& text) {
  if (text == search_) return;
  std::vector<std::string> words = searchWords(text);
  // Narrowing when every old word lives inside some new word: the new matches are a subset
  // of the rows shown now, so only those are checked (each keystroke of a word).
  bool narrowing = true;
  for (const auto& o : words_) {
    bool inside = false;
    for (const auto& n : words) inside = inside || n.find(o) != std::string::npos;
    narrowing = narrowing && inside;
  }
  beginResetModel();
  search_ = text;
  words_ = std::move(words);
  refilter(narrowing);
  endResetModel();
}

void RunsTableModel::setStatusFilter(const QString& status) {
  if (status == status_) return;
  beginResetModel();
  const bool narrowing = status_.isEmpty();
  status_ = status;
  refilter(narrowing);
  endResetModel();
}

bool RunsTableModel::matches(const RunEntry& e) const {
  if (!status_.isEmpty() && QString::fromStdString(e.summary.status) != status_) return false;
  for (const auto& w : words_)
    if (e.searchText.find(w) == std::string::npos) return false;
  return true;
}

void RunsTableModel::resort() {
  sorted_.resize(all_.size());
  for (size_t i = 0; i < all_.size(); ++i) sorted_[i] = static_cast<int>(i);
  const int col = sortColumn_;
  const bool desc = sortOrder_ == Qt::DescendingOrder;
  std::vector<Key> keys(all_.size());
  for (size_t i = 0; i < all_.size(); ++i) keys[i] = keyOf(all_[i], col);
  std::stable_sort(sorted_.begin(), sorted_.end(), [&](int a, int b) {
    const Key& x = keys[a];
    const Key& y = keys[b];
    if (x.missing != y.missing) return y.missing;  // missing last either way
    int c = 0;
    if (x.isText)
      c = QString::compare(x.text, y.text, Qt::CaseInsensitive);
    else
      c = x.num < y.num ? -1 : (x.num > y.num ? 1 : 0);
    if (c == 0) return all_[a].summary.id > all_[b].summary.id;  // newest first among equals
    return desc ? c > 0 : c < 0;
  });
}

void RunsTableModel::refilter(bool narrowing) {
  const std::vector<int>& from = narrowing ? rows_ : sorted_;
  std::vector<int> out;
  out.reserve(from.size());
  for (int i : from)
    if (matches(all_[i])) out.push_back(i);
  rows_ = std::move(out);
}

void RunsTableModel::sort(int column, Qt::SortOrder order) {
  if (column < 0 || column >= ColumnCount) return;
  emit layoutAboutToBeChanged({}, QAbstractItemModel::VerticalSortHint);
  const QModelIndexList before = persistentIndexList();
  std::vector<int64_t> ids;
  for (const auto& i : before) ids.push_back(run(i.row()) ? run(i.row())->id : 0);
  sortColumn_ = column;
  sortOrder_ = order;
  resort();
  refilter(false);
  QModelIndexList after;
  for (size_t k = 0; k < ids.size(); ++k) {
    const int r = rowOfRun(ids[k]);
    after << (r < 0 ? QModelIndex() : index(r, before[k].column()));
  }
  changePersistentIndexList(before, after);
  emit layoutChanged({}, QAbstractItemModel::VerticalSortHint);
}

const RunEntry* RunsTableModel::entry(int row) const {
  return row >= 0 && row < static_cast<int>(rows_.size()) ? &all_[rows_[row]] : nullptr;
}

const core::RunSummary* RunsTableModel::run(int row) const {
  const RunEntry* e = entry(row);
  return e ? &e->summary : nullptr;
}

int RunsTableModel::rowsWithStatus(const std::string& status) const {
  int n = 0;
  for (int r = 0; r < rowCount(); ++r) n += run(r)->status == status;
  return n;
}

int RunsTableModel::rowOfRun(int64_t id) const {
  for (int r = 0; r < static_cast<int>(rows_.size()); ++r)
    if (all_[rows_[r]].summary.id == id) return r;
  return -1;
}

std::vector<int64_t> RunsTableModel::runningRuns() const {
  std::vector<int64_t> ids;
  for (const auto& e : all_)
    if (e.summary.status == "running") ids.push_back(e.summary.id);
  return ids;
}

void RunsTableModel::updateSummaries(std::vector<core::RunSummary> summaries) {
  bool any = false;
  for (auto& s : summaries)
    for (auto& e : all_)
      if (e.summary.id == s.id) {
        // A profile recorded since the load earns its badge now.
        if (s.profiled && !e.badges.contains("profiled")) {
          e.badges.removeAll("profile");
          e.badges << "profiled";
        }
        e.summary = std::move(s);
        any = true;
        break;
      }
  if (!any) return;
  // Re-sorting keeps the persistent indexes (the selection) on their runs.
  sort(sortColumn_, sortOrder_);
  if (rowCount() > 0) emit dataChanged(index(0, 0), index(rowCount() - 1, ColumnCount - 1));
}

int RunsTableModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(rows_.size());
}
int RunsTableModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant RunsTableModel::data(const QModelIndex& index, int role) const {
  const RunEntry* e = index.isValid() ? entry(index.row()) : nullptr;
  if (!e || index.column() >= ColumnCount) return {};
  const core::RunSummary* r = &e->summary;
  const int c = index.column();
  if (role == BadgesRole) return c == Techniques ? QVariant(e->badges) : QVariant();
  if (role == Qt::TextAlignmentRole)
    return int((c == Name || c == Status || c == Tags || c == Started || c == Techniques
                    ? Qt::AlignLeft
                    : Qt::AlignRight) |
               Qt::AlignVCenter);
  if (role == Qt::ToolTipRole && c == PeakMemory)
    return QStringLiteral("Highest device-memory peak of any rank (%1 rank%2)")
        .arg(r->ranks)
        .arg(r->ranks == 1 ? "" : "s");
  if (role == Qt::ToolTipRole && c == Accuracy)
    return QStringLiteral("Exact-match accuracy on held-out samples at the latest evaluation");
  if (role == Qt::ToolTipRole && c == Techniques && !e->badges.isEmpty())
    return QStringLiteral("Techniques in this run's config: %1").arg(e->badges.join(", "));
  if (role == Qt::ToolTipRole) {
    QString t = QString::fromStdString(r->name);
    if (!r->reason.empty()) t += "\n" + QString::fromStdString(r->reason);
    if (!r->notes.empty()) t += "\n\n" + QString::fromStdString(r->notes);
    return t;
  }
  if (role == Qt::UserRole) {
    const Key k = keyOf(*e, c);
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
      return lossText(r->lastLoss);
    case BestEvalLoss:
      return lossText(r->bestEvalLoss);
    case Accuracy:
      return r->accuracy ? formatAccuracy(*r->accuracy) : QStringLiteral("—");
    case TokensPerS:
      return r->tokensPerS ? QLocale().toString(*r->tokensPerS, 'f', 0) : QStringLiteral("—");
    case PeakMemory: {
      if (r->peakMemory <= 0) return QStringLiteral("—");
      QString t = QString::fromStdString(core::formatBytes(double(r->peakMemory)));
      if (r->ranks > 1) t += QStringLiteral(" ×%1").arg(r->ranks);
      return t;
    }
    case Techniques:
      return e->badges.join(" · ");
    case Tags:
      return tagsText(*r);
    case Model:
      return e->model;
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
    case Accuracy:
      return "Accuracy";
    case TokensPerS:
      return "Tokens/s";
    case PeakMemory:
      return "Peak mem/rank";
    case Techniques:
      return "Techniques";
    case Tags:
      return "Tags";
    case Model:
      return "Model";
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
              {"accuracy", opt(r.accuracy)},
              {"peak_memory", r.peakMemory}};
  json j = {{"run", run}, {"config", r.config}};
  json rows = json::array();
  for (const auto& s : steps) rows.push_back(core::toJson(s));
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
    std::vector<RunEntry> entries;
    QString error;
  };
  const int gen = ++reloadGeneration_;
  const RunRepository repo = repo_;
  // Two phases on the worker: the summaries (one query, ~0.2 s for 10,000 runs) fill the table
  // at once; the configs (one lookup per run, seconds for 10,000) then add badges and config
  // search. Entries are built here, so the GUI thread only swaps rows.
  auto phase = [this, gen](bool withConfigs, auto job) {
    ++busy_;
    auto* w = new QFutureWatcher<Result>(this);
    connect(w, &QFutureWatcher<Result>::finished, this, [this, w, gen, withConfigs] {
      Result r = w->result();
      w->deleteLater();
      --busy_;
      if (gen != reloadGeneration_) return;  // a newer reload is on its way
      if (!r.error.isEmpty()) {
        emit done(false, r.error);
        return;
      }
      const int n = static_cast<int>(r.entries.size());
      if (!withConfigs && detailsGeneration_ == gen) {  // the configs won the race: keep them
        emit loaded(n);
        return;
      }
      if (withConfigs) detailsGeneration_ = gen;
      if (!withConfigs) extras_.clear();  // checkpoints or profiles may have been added since
      model_->setEntries(std::move(r.entries));
      if (withConfigs)
        emit detailsLoaded(n);
      else
        emit loaded(n);
    });
    w->setFuture(QtConcurrent::run(job));
  };
  phase(false, [repo] {
    Result r;
    auto runs = repo.listRuns(&r.error);
    r.entries.reserve(runs.size());
    for (auto& s : runs) r.entries.push_back(makeRunEntry(std::move(s)));
    return r;
  });
  phase(true, [repo] {
    Result r;
    auto details = repo.listRunDetails(&r.error);
    r.entries.reserve(details.size());
    for (auto& d : details) {
      nlohmann::json config = std::move(d.config);
      r.entries.push_back(makeRunEntry(std::move(static_cast<core::RunSummary&>(d)), config));
    }
    return r;
  });
}

void RunsBrowser::fetchExtras(int64_t id) {
  if (id <= 0 || fetching_.count(id)) return;
  fetching_.insert(id);
  ++busy_;
  struct Result {
    RunRepository::RunExtras extras;
    QString error;
  };
  auto* w = new QFutureWatcher<Result>(this);
  connect(w, &QFutureWatcher<Result>::finished, this, [this, w, id] {
    Result r = w->result();
    w->deleteLater();
    --busy_;
    fetching_.erase(id);
    if (!r.error.isEmpty()) emit done(false, r.error);
    extras_[id] = r.extras;
    emit extrasReady(id);
  });
  const RunRepository repo = repo_;
  w->setFuture(QtConcurrent::run([repo, id] {
    Result r;
    r.extras = repo.extras(id, &r.error);
    return r;
  }));
}

void RunsBrowser::refreshRunning() {
  const std::vector<int64_t> ids = model_->runningRuns();
  if (ids.empty() || refreshingRunning_) return;
  refreshingRunning_ = true;
  ++busy_;
  struct Result {
    std::vector<core::RunSummary> runs;
    QString error;
  };
  auto* w = new QFutureWatcher<Result>(this);
  const int gen = reloadGeneration_;
  connect(w, &QFutureWatcher<Result>::finished, this, [this, w, gen] {
    Result r = w->result();
    w->deleteLater();
    --busy_;
    refreshingRunning_ = false;
    if (gen != reloadGeneration_) return;  // a reload replaced the rows meanwhile
    const int n = static_cast<int>(r.runs.size());
    if (r.error.isEmpty()) model_->updateSummaries(std::move(r.runs));
    emit runningRefreshed(n);
  });
  const RunRepository repo = repo_;
  w->setFuture(QtConcurrent::run([repo, ids] {
    Result r;
    repo.withStore(
        [&](core::RunStore& store) {
          for (int64_t id : ids)
            if (auto d = store.getRun(id)) r.runs.push_back(std::move(*d));
        },
        &r.error);
    return r;
  }));
}

std::optional<RunRepository::RunExtras> RunsBrowser::extras(int64_t id) const {
  auto it = extras_.find(id);
  if (it == extras_.end()) return std::nullopt;
  return it->second;
}

void RunsBrowser::exportTrace(int64_t id, const QString& path) {
  edit(
      [id, path](RunRepository& r) -> QString {
        QString err;
        int skipped = 0;
        auto spans = r.kernelSpans(id, &err, &skipped);
        if (!err.isEmpty()) return err;
        if (spans.empty())
          return QStringLiteral(
                     "Run %1 has no profile (no kernel timeline was recorded); turn on profiling "
                     "in the wizard or press \u201cProfile now\u201d while it runs")
              .arg(id);
        std::string error;
        if (!profiler::writeChromeTrace(path.toStdString(), spans, {}, {}, &error))
          return QString::fromStdString(error);
        return {};
      },
      QStringLiteral("Trace of run %1 exported to %2 (open it in chrome://tracing or Perfetto)")
          .arg(id)
          .arg(path),
      false);
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
