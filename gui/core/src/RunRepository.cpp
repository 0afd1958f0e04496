#include "trainscope/gui/RunRepository.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include <QFutureWatcher>
#include <QtConcurrent/QtConcurrentRun>

#include "trainscope/gui/RunControl.h"
#include "trainscope/profiler/Aggregation.h"

namespace ts::gui {

RunRepository::RunRepository(std::string path) : path_(std::move(path)) {}

std::optional<core::RunStore> RunRepository::openStore(QString* error) const {
  std::error_code ec;
  if (!std::filesystem::exists(path_, ec)) return std::nullopt;
  try {
    return core::RunStore::open(path_, core::RunStore::Mode::ReadOnly);
  } catch (const std::exception& e) {
    if (error) *error = QString::fromStdString(e.what());
    return std::nullopt;
  }
}

template <class F>
static auto guarded(QString* error, F f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    if (error) *error = QString::fromStdString(e.what());
    return {};
  }
}

// Opens read-write (never creating the file), runs op, and turns "unknown id" and store
// errors into text.
template <class F>
static QString editStore(const std::string& path, int64_t id, F op) {
  try {
    core::RunStore::Options o;
    o.create = false;
    auto store = core::RunStore::open(path, core::RunStore::Mode::ReadWrite, o);
    if (!op(store))
      return QStringLiteral("Run %1 is not in %2").arg(id).arg(QString::fromStdString(path));
    return {};
  } catch (const std::exception& e) {
    return QString::fromStdString(e.what());
  }
}

QString RunRepository::rename(int64_t id, const std::string& name) const {
  if (name.empty()) return QStringLiteral("A run name cannot be empty");
  return editStore(path_, id, [&](core::RunStore& s) { return s.rename(id, name); });
}
QString RunRepository::setTags(int64_t id, const std::vector<std::string>& tags) const {
  return editStore(path_, id, [&](core::RunStore& s) { return s.setTags(id, tags); });
}
QString RunRepository::setNotes(int64_t id, const std::string& notes) const {
  return editStore(path_, id, [&](core::RunStore& s) { return s.setNotes(id, notes); });
}
QString RunRepository::deleteRun(int64_t id, bool deleteFiles) const {
  return editStore(path_, id, [&](core::RunStore& s) { return s.deleteRun(id, deleteFiles); });
}

std::vector<core::RunSummary> RunRepository::listRuns(QString* error) const {
  auto store = openStore(error);
  if (!store) return {};
  return guarded(error, [&] { return store->listRuns(); });
}

std::optional<core::RunDetail> RunRepository::getRun(int64_t id, QString* error) const {
  auto store = openStore(error);
  if (!store) return std::nullopt;
  return guarded(error, [&] { return store->getRun(id); });
}

std::vector<core::StepRow> RunRepository::steps(int64_t id, int64_t fromStep,
                                                QString* error) const {
  auto store = openStore(error);
  if (!store) return {};
  return guarded(error, [&] { return store->steps(id, fromStep); });
}

std::vector<core::EvalRow> RunRepository::evals(int64_t id, QString* error) const {
  auto store = openStore(error);
  if (!store) return {};
  return guarded(error, [&] { return store->evals(id); });
}

RunRepository::MemoryState RunRepository::memory(int64_t id, QString* error) const {
  MemoryState out;
  auto store = openStore(error);
  if (!store) return out;
  auto rows = guarded(error, [&] { return store->memorySamples(id, true); });
  // Keep the latest sample seq for measured and for planned; build reports from those rows.
  int64_t lastMeasured = -1, lastPlanned = -1;
  for (const auto& r : rows)
    (r.planned ? lastPlanned : lastMeasured) =
        std::max(r.planned ? lastPlanned : lastMeasured, r.seq);
  auto build = [&](bool planned, int64_t seq) -> std::optional<core::MemoryReport> {
    if (seq < 0) return std::nullopt;
    std::map<int, core::RankMemory> ranks;
    for (const auto& r : rows) {
      if (r.planned != planned || r.seq != seq) continue;
      auto tier = core::memoryTierFromString(r.tier);
      auto cat = core::memoryCategoryFromString(r.category);
      if (!tier || !cat) continue;
      auto& rm = ranks[r.rank];
      rm.rank = r.rank;
      rm.at(*tier, *cat) = {r.current, r.peak};
    }
    core::MemoryReport rep;
    for (auto& [k, v] : ranks) rep.ranks.push_back(v);
    return rep;
  };
  out.measured = build(false, lastMeasured);
  out.planned = build(true, lastPlanned);
  return out;
}

std::vector<RunRepository::MemorySnapshot> RunRepository::memoryHistory(int64_t id,
                                                                        int64_t afterSeq,
                                                                        QString* error) const {
  std::vector<MemorySnapshot> out;
  auto store = openStore(error);
  if (!store) return out;
  auto rows = guarded(error, [&] { return store->memorySamples(id, false, afterSeq); });
  // Rows come by seq: one report per event, its ranks in rank order.
  std::map<int, core::RankMemory> ranks;
  auto flush = [&] {
    if (ranks.empty()) return;
    for (auto& [k, v] : ranks) out.back().report.ranks.push_back(v);
    ranks.clear();
  };
  for (const auto& r : rows) {
    if (out.empty() || out.back().seq != r.seq) {
      flush();
      out.push_back({r.seq, r.step, {}});
    }
    auto tier = core::memoryTierFromString(r.tier);
    auto cat = core::memoryCategoryFromString(r.category);
    if (!tier || !cat) continue;
    auto& rm = ranks[r.rank];
    rm.rank = r.rank;
    rm.at(*tier, *cat) = {r.current, r.peak};
  }
  flush();
  return out;
}

std::vector<core::EventRow> RunRepository::events(int64_t id, const std::vector<std::string>& types,
                                                  int offset, QString* error) const {
  auto store = openStore(error);
  if (!store) return {};
  return guarded(error, [&] { return store->events(id, types, -1, offset); });
}

std::vector<RunRepository::CheckpointRef> RunRepository::checkpoints(QString* error) const {
  std::vector<CheckpointRef> out;
  auto store = openStore(error);
  if (!store) return out;
  guarded(error, [&] {
    for (const auto& run : store->listRuns()) {
      for (const auto& c : store->checkpoints(run.id))
        out.push_back({run.id, run.name, c.step, c.path});
    }
    return 0;
  });
  return out;
}

std::vector<core::RunDetail> RunRepository::listRunDetails(QString* error) const {
  std::vector<core::RunDetail> out;
  auto store = openStore(error);
  if (!store) return out;
  guarded(error, [&] {
    out = store->allRunDetails();
    return 0;
  });
  return out;
}

RunRepository::RunExtras RunRepository::extras(int64_t id, QString* error) const {
  RunExtras x;
  x.runId = id;
  auto store = openStore(error);
  if (!store) return x;
  guarded(error, [&] {
    auto cps = store->checkpoints(id);
    for (auto& c : cps)
      if (!x.lastCheckpoint || c.step >= x.lastCheckpoint->step) x.lastCheckpoint = c;
    std::error_code ec;
    x.checkpointExists = x.lastCheckpoint && !x.lastCheckpoint->path.empty() &&
                         std::filesystem::exists(x.lastCheckpoint->path, ec);
    x.hasProfile = !store->events(id, {"kernels"}, 1).empty();
    return 0;
  });
  return x;
}

std::vector<profiler::Span> RunRepository::kernelSpans(int64_t id, QString* error,
                                                       int* skipped) const {
  std::vector<profiler::Span> spans;
  if (skipped) *skipped = 0;
  auto store = openStore(error);
  if (!store) return spans;
  guarded(error, [&] {
    for (auto& e : store->events(id, {"kernels"})) {
      try {
        auto batch = profiler::spansFromKernelsEvent(e.body);
        spans.insert(spans.end(), batch.begin(), batch.end());
      } catch (const std::exception&) {
        if (skipped) ++*skipped;
      }
    }
    return 0;
  });
  std::stable_sort(spans.begin(), spans.end(),
                   [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
  return spans;
}

struct DatabaseFollower::Delta {
  std::vector<core::StepRow> steps;
  std::vector<core::EvalRow> evals;
  std::vector<core::EventRow> events;
  std::vector<RunRepository::MemorySnapshot> memory;
  std::optional<core::RunDetail> detail;
  bool controllable = false;
  QString error;
};

DatabaseFollower::DatabaseFollower(RunRepository repo, int64_t runId, LiveRun* run, QObject* parent)
    : QObject(parent), repo_(std::move(repo)), runId_(runId), run_(run) {
  run_->setRunId(runId);
  timer_.setInterval(1000);
  connect(&timer_, &QTimer::timeout, this, &DatabaseFollower::pollNow);
  timer_.start();
  pollNow();
}

// What the log replays: the events not kept in tables of their own (steps, evals and memory
// are), so nothing shows twice.
static const std::vector<std::string> kReplayedEvents = {
    "hello", "log", "warning", "error", "checkpoint", "memory_plan", "finished"};

void DatabaseFollower::pollNow() {
  if (busy_) return;
  busy_ = true;
  auto* watcher = new QFutureWatcher<Delta>(this);
  const RunRepository repo = repo_;
  const int64_t id = runId_, from = nextStep_, memSeq = memorySeq_;
  const int eventsFrom = eventsSeen_;
  connect(watcher, &QFutureWatcher<Delta>::finished, this, [this, watcher] {
    applyDelta(watcher->result());
    watcher->deleteLater();
    busy_ = false;
  });
  watcher->setFuture(QtConcurrent::run([repo, id, from, memSeq, eventsFrom] {
    Delta d;
    d.detail = repo.getRun(id, &d.error);
    if (!d.detail) return d;
    d.steps = repo.steps(id, from, &d.error);
    d.evals = repo.evals(id, &d.error);
    d.events = repo.events(id, kReplayedEvents, eventsFrom, &d.error);
    d.memory = repo.memoryHistory(id, memSeq, &d.error);
    if (d.detail->status == "running")
      d.controllable = RunControl::listening(QString::fromStdString(d.detail->runDir));
    return d;
  }));
}

void DatabaseFollower::applyDelta(const Delta& d) {
  if (!d.error.isEmpty()) run_->addLog("warning", "database: " + d.error);
  if (!d.detail) {
    // Deleted (or the database went): nothing more will come.
    if (d.error.isEmpty() && run_->isActive())
      run_->setState(RunState::Failed,
                     QStringLiteral("run #%1 is no longer in the database").arg(runId_));
    run_->setControllable(false);
    timer_.stop();
    return;
  }
  if (run_->runDir().isEmpty()) run_->setRunDir(QString::fromStdString(d.detail->runDir));
  if (run_->config().is_null() && !d.detail->config.is_null()) {
    core::Event e;
    e.type = core::EventType::Config;
    e.body = d.detail->config;
    run_->apply(e);
  }
  for (const auto& row : d.events) {
    if (row.type == "finished") continue;  // the status below says it, with the reason
    core::Event e;
    e.type = core::eventTypeFromString(row.type);
    e.typeName = row.type;
    e.time = row.time;
    e.body = row.body.is_object() ? row.body : nlohmann::json::object();
    run_->apply(e);
  }
  eventsSeen_ += static_cast<int>(d.events.size());
  for (const auto& s : d.steps) {
    core::StepEvent ev;
    ev.step = s.step;
    ev.loss = s.loss.value_or(0);
    ev.lr = s.lr.value_or(0);
    ev.grad_norm = s.gradNorm.value_or(0);
    ev.tokens = s.tokens.value_or(0);
    ev.tokens_per_s = s.tokensPerS.value_or(0);
    ev.step_ms = s.stepMs.value_or(0);
    ev.loss_scale = s.lossScale.value_or(1.0);
    ev.skipped = s.skipped;
    run_->applyStep(ev, s.time);
    nextStep_ = std::max(nextStep_, s.step + 1);
  }
  for (size_t i = evalsSeen_; i < d.evals.size(); ++i) {
    core::Event e;
    e.type = core::EventType::Eval;
    e.body = d.evals[i].body.is_object() ? d.evals[i].body : nlohmann::json::object();
    e.body["step"] = d.evals[i].step;
    if (d.evals[i].loss) e.body["loss"] = *d.evals[i].loss;
    run_->apply(e);
  }
  evalsSeen_ = std::max(evalsSeen_, d.evals.size());
  // Every measured sample, so the memory-over-time chart has the history from before.
  for (const auto& m : d.memory) {
    core::Event e;
    e.type = core::EventType::Memory;
    e.body = core::toJson(m.report);
    e.body["step"] = m.step >= 0 ? m.step : run_->lastStep();
    run_->apply(e);
    memorySeq_ = std::max(memorySeq_, m.seq);
  }
  const auto& st = d.detail->status;
  if (st != "running") {
    const QString reason = QString::fromStdString(d.detail->reason);
    run_->setControllable(false);
    run_->setState(st == "completed" ? RunState::Completed
                   : st == "stopped" ? RunState::Stopped
                                     : RunState::Failed,
                   reason.isEmpty() ? QString::fromStdString(st) : reason);
    timer_.stop();
    return;
  }
  run_->setControllable(d.controllable);
  if (!d.controllable) {
    // Its engine does not answer on the socket (another machine, or older than sockets):
    // followed, not controlled.
    if (run_->state() != RunState::Detached) run_->setState(RunState::Detached);
  } else if (run_->state() == RunState::Starting || run_->state() == RunState::Detached) {
    run_->setState(RunState::Running);
  }
}

}  // namespace ts::gui
