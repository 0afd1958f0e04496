#include "trainscope/core/store/RunStore.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "RunStoreDb.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace ts::core {

using store::Db;
using store::Stmt;

std::string_view toString(MetricColumn c) {
  return store::metricSqlColumn(c);
}

std::optional<MetricColumn> metricColumnFromString(std::string_view s) {
  for (auto c : allMetricColumns())
    if (s == store::metricSqlColumn(c)) return c;
  return std::nullopt;
}

std::vector<MetricColumn> allMetricColumns() {
  return {MetricColumn::Loss,      MetricColumn::Lr,     MetricColumn::GradNorm,
          MetricColumn::LossScale, MetricColumn::Tokens, MetricColumn::TokensPerS,
          MetricColumn::StepMs,    MetricColumn::Skipped};
}

struct RunStore::Impl {
  Impl(const std::string& path, bool ro, const Options& o)
      : db(path, ro, o.create, o.busyTimeoutMs, o.staleAfterSeconds) {}
  Db db;
  std::mutex mutex;
};

RunStore::RunStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RunStore::RunStore(RunStore&&) noexcept = default;
RunStore& RunStore::operator=(RunStore&&) noexcept = default;
RunStore::~RunStore() = default;

RunStore RunStore::open(const std::string& path, Mode mode, Options options) {
  // Where waiting could deadlock, SQLite answers "busy" at once instead of calling its busy
  // handler: switching a new file to WAL, or reading it while another process does. Engines
  // started together hit exactly that, so opening is retried (jittered) up to the busy timeout.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options.busyTimeoutMs);
  std::minstd_rand jitter(std::random_device{}());
  for (;;) {
    try {
      auto impl = std::make_unique<Impl>(path, mode == Mode::ReadOnly, options);
      impl->db.migrate();
      RunStore s(std::move(impl));
      if (mode == Mode::ReadWrite) s.markCrashedRuns();
      return s;
    } catch (const StoreError& e) {
      if (e.kind() != StoreError::Kind::Locked || std::chrono::steady_clock::now() >= deadline)
        throw;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2 + jitter() % 20));
  }
}

const std::string& RunStore::path() const {
  return impl_->db.path();
}
bool RunStore::readOnly() const {
  return impl_->db.readOnly();
}
int RunStore::schemaVersion() const {
  return impl_->db.userVersion();
}

namespace {

constexpr const char* kEffectiveStatus =
    "(CASE WHEN status = 'running' AND ts_dead(host, pid, heartbeat) THEN 'crashed' "
    "ELSE status END)";

std::string summaryColumns() {
  return std::string("id, name, tags, notes, created, started, finished, heartbeat, ") +
         kEffectiveStatus +
         ", reason, backend, ranks, steps, last_step, last_loss, best_eval_loss, tokens_per_s, "
         "peak_memory, parent_run, teacher_run, pid, host, run_dir";
}

void readSummary(Stmt& s, RunSummary& r) {
  r.id = s.i64(0);
  r.name = s.text(1);
  try {
    std::string text = s.text(2);
    auto tags = text == "[]" ? json::array() : json::parse(text);
    for (auto& t : tags)
      if (t.is_string()) r.tags.push_back(t.get<std::string>());
  } catch (const json::exception&) {
  }
  r.notes = s.text(3);
  r.created = s.f64(4);
  r.started = s.f64(5);
  r.finished = s.f64(6);
  r.heartbeat = s.f64(7);
  r.status = s.text(8);
  r.reason = s.text(9);
  r.backend = s.text(10);
  r.ranks = static_cast<int>(s.i64(11));
  r.steps = s.i64(12);
  r.lastStep = s.isNull(13) ? -1 : s.i64(13);
  r.lastLoss = s.optF64(14);
  r.bestEvalLoss = s.optF64(15);
  r.tokensPerS = s.optF64(16);
  r.peakMemory = s.i64(17);
  r.parentRun = s.i64(18);
  r.teacherRun = s.i64(19);
  r.pid = s.i64(20);
  r.host = s.text(21);
  r.runDir = s.text(22);
}

std::string configJsonPath(const std::string& p) {
  if (p.empty() || p[0] == '$') return p;
  if (p[0] == '[') return "$" + p;
  return "$." + p;
}

// WHERE clause for a filter; binders run after prepare, in order.
struct Where {
  std::string sql;
  std::vector<std::function<void(Stmt&, int)>> binds;
  void add(const std::string& clause, std::function<void(Stmt&, int)> b) {
    sql += sql.empty() ? " WHERE " : " AND ";
    sql += clause;
    if (b) binds.push_back(std::move(b));
  }
};

Where buildWhere(const RunFilter& f) {
  Where w;
  if (!f.statuses.empty()) {
    std::string arr = json(f.statuses).dump();
    w.add(std::string(kEffectiveStatus) + " IN (SELECT value FROM json_each(?))",
          [arr](Stmt& s, int i) { s.bind(i, arr); });
  }
  if (!f.tag.empty())
    w.add("EXISTS (SELECT 1 FROM json_each(runs.tags) WHERE value = ?)",
          [t = f.tag](Stmt& s, int i) { s.bind(i, t); });
  if (!f.nameContains.empty())
    w.add("instr(lower(name), lower(?)) > 0",
          [t = f.nameContains](Stmt& s, int i) { s.bind(i, t); });
  if (f.createdFrom) w.add("created >= ?", [v = *f.createdFrom](Stmt& s, int i) { s.bind(i, v); });
  if (f.createdTo) w.add("created < ?", [v = *f.createdTo](Stmt& s, int i) { s.bind(i, v); });
  if (!f.configPath.empty()) {
    std::string path = configJsonPath(f.configPath);
    w.add("json_valid(config)", nullptr);
    w.binds.push_back([path](Stmt& s, int i) { s.bind(i, path); });
    const std::string& v = f.configValue;
    char* end = nullptr;
    double d = std::strtod(v.c_str(), &end);
    std::function<void(Stmt&, int)> bv;
    if (!v.empty() && end == v.c_str() + v.size() && std::isfinite(d))
      bv = [d](Stmt& s, int i) { s.bind(i, d); };
    else if (v == "true" || v == "false")
      bv = [b = v == "true"](Stmt& s, int i) { s.bind(i, static_cast<int64_t>(b ? 1 : 0)); };
    else
      bv = [v](Stmt& s, int i) { s.bind(i, v); };
    w.sql += " AND json_extract(config, ?) = ?";
    w.binds.push_back(bv);
  }
  return w;
}

const char* sortColumn(RunSortKey k) {
  switch (k) {
    case RunSortKey::Created:
      return "created";
    case RunSortKey::Name:
      return "name COLLATE NOCASE";
    case RunSortKey::Status:
      return "status";
    case RunSortKey::Steps:
      return "steps";
    case RunSortKey::LastLoss:
      return "last_loss";
    case RunSortKey::BestEvalLoss:
      return "best_eval_loss";
    case RunSortKey::TokensPerS:
      return "tokens_per_s";
    case RunSortKey::PeakMemory:
      return "peak_memory";
    case RunSortKey::Id:
      return "id";
  }
  return "created";
}

// Rethrows SQLite's complaint about a bad JSON path as bad input naming the path.
template <class F>
auto withConfigPath(const RunFilter& f, F&& fn) {
  try {
    return fn();
  } catch (const StoreError& e) {
    if (!f.configPath.empty() && std::string(e.what()).find("JSON path") != std::string::npos)
      throw StoreError(StoreError::Kind::BadInput,
                       "config path '" + f.configPath +
                           "' is not valid (use dotted keys such as optimizer.lr or "
                           "layers[0].dim): " +
                           e.what());
    throw;
  }
}

void requireWritable(Db& db) {
  if (db.readOnly())
    throw StoreError(StoreError::Kind::ReadOnly,
                     "database " + db.path() + " was opened read-only; cannot modify runs");
}

void flatten(const json& j, const std::string& prefix, std::map<std::string, json>& out) {
  if (j.is_object() && !j.empty()) {
    for (auto& [k, v] : j.items()) flatten(v, prefix.empty() ? k : prefix + "." + k, out);
  } else if (j.is_array() && !j.empty()) {
    for (size_t i = 0; i < j.size(); ++i)
      flatten(j[i], prefix + "[" + std::to_string(i) + "]", out);
  } else {
    out[prefix] = j;
  }
}

}  // namespace

std::vector<RunSummary> RunStore::listRuns(const RunFilter& filter) {
  std::lock_guard lock(impl_->mutex);
  return withConfigPath(filter, [&] {
    Where w = buildWhere(filter);
    std::string order = sortColumn(filter.sort);
    std::string dir = filter.descending ? " DESC" : " ASC";
    // Nullable keys sort their NULLs last; the others can use their index directly.
    bool nullable = filter.sort == RunSortKey::LastLoss ||
                    filter.sort == RunSortKey::BestEvalLoss ||
                    filter.sort == RunSortKey::TokensPerS;
    std::string sql = "SELECT " + summaryColumns() + " FROM runs" + w.sql + " ORDER BY " +
                      (nullable ? "(" + order + " IS NULL), " : std::string()) + order + dir +
                      ", id" + dir + " LIMIT ? OFFSET ?";
    auto s = impl_->db.prepare(sql.c_str());
    int i = 1;
    for (auto& b : w.binds) b(s, i++);
    s.bind(i++, static_cast<int64_t>(filter.limit));
    s.bind(i++, static_cast<int64_t>(std::max(0, filter.offset)));
    std::vector<RunSummary> out;
    while (s.step()) {
      RunSummary r;
      readSummary(s, r);
      out.push_back(std::move(r));
    }
    return out;
  });
}

int64_t RunStore::countRuns(const RunFilter& filter) {
  std::lock_guard lock(impl_->mutex);
  return withConfigPath(filter, [&] {
    Where w = buildWhere(filter);
    auto s = impl_->db.prepare(("SELECT count(*) FROM runs" + w.sql).c_str());
    int i = 1;
    for (auto& b : w.binds) b(s, i++);
    s.step();
    return s.i64(0);
  });
}

namespace {
RunDetail readDetail(Stmt& s) {
  RunDetail r;
  readSummary(s, r);
  if (!s.isNull(23)) {
    try {
      r.config = json::parse(s.text(23));
    } catch (const json::exception&) {
      r.config = nullptr;  // a damaged config must not hide the run
    }
  }
  return r;
}
}  // namespace

std::optional<RunDetail> RunStore::getRun(int64_t id) {
  std::lock_guard lock(impl_->mutex);
  auto s =
      impl_->db.prepare(("SELECT " + summaryColumns() + ", config FROM runs WHERE id=?").c_str());
  s.bind(1, id);
  if (!s.step()) return std::nullopt;
  return readDetail(s);
}

std::vector<RunDetail> RunStore::allRunDetails() {
  std::lock_guard lock(impl_->mutex);
  auto s = impl_->db.prepare(
      ("SELECT " + summaryColumns() + ", config FROM runs ORDER BY id DESC").c_str());
  std::vector<RunDetail> out;
  while (s.step()) out.push_back(readDetail(s));
  return out;
}

MetricSeries RunStore::metrics(int64_t id, MetricColumn column, int maxPoints,
                               std::optional<int64_t> fromStep, std::optional<int64_t> toStep) {
  std::lock_guard lock(impl_->mutex);
  auto& db = impl_->db;
  MetricSeries out;
  out.column = column;
  maxPoints = std::max(1, maxPoints);
  // Two subqueries: each min/max alone is an index lookup; together they would scan the run.
  auto range = db.prepare(
      "SELECT (SELECT min(step) FROM metrics WHERE run_id=?1), "
      "(SELECT max(step) FROM metrics WHERE run_id=?1)");
  range.bind(1, id);
  range.step();
  if (range.isNull(0)) return out;
  int64_t lo = std::max(range.i64(0), fromStep.value_or(INT64_MIN));
  int64_t hi = std::min(range.i64(1), toStep.value_or(INT64_MAX));
  if (lo > hi) return out;
  const std::string col = store::metricSqlColumn(column);
  int64_t span = hi - lo + 1;

  Stmt q;
  if (span <= maxPoints) {
    q = db.prepare(("SELECT step, step, " + col + ", " + col + ", " + col +
                    ", 1 FROM metrics WHERE run_id=?1 AND step BETWEEN ?2 AND ?3 AND " + col +
                    " IS NOT NULL ORDER BY step")
                       .c_str());
    q.bind(1, id).bind(2, lo).bind(3, hi);
  } else {
    out.downsampled = true;
    int64_t width = (span + maxPoints - 1) / maxPoints;
    int64_t level = 0;
    for (int64_t l : store::kRollupLevels)
      if (l <= 2 * width) level = l;  // coarser is fine: >= maxPoints / 2 buckets, fewer rows
    if (level == 0) {
      // Narrow buckets: aggregate the raw rows (fewer than 8 * maxPoints of them).
      q = db.prepare(("SELECT min(step), max(step), min(" + col + "), max(" + col + "), avg(" +
                      col + "), count(" + col +
                      ") FROM metrics WHERE run_id=?1 AND step BETWEEN ?2 AND ?3 AND " + col +
                      " IS NOT NULL GROUP BY (step - ?2) / ?4 ORDER BY 1")
                         .c_str());
      q.bind(1, id).bind(2, lo).bind(3, hi).bind(4, width);
    } else {
      // Whole rollup buckets inside [lo, hi], raw rows at the two ragged edges.
      width = (width + level - 1) / level * level;
      int64_t fullLo = (lo + level - 1) / level * level;  // first whole bucket start
      int64_t fullHi = (hi + 1) / level * level;          // end (exclusive) of whole buckets
      if (lo < 0) fullLo = fullHi = lo;                   // negative steps: raw only
      q = db.prepare(("WITH parts(s, mn, mx, sm, n, fs, ls) AS ("
                      " SELECT step, " +
                      col + ", " + col + ", " + col +
                      ", 1, step, step"
                      " FROM metrics WHERE run_id=?1 AND step >= ?2 AND step < ?4 AND " +
                      col +
                      " IS NOT NULL"
                      " UNION ALL SELECT bucket * ?7, mn, mx, sm, n, first_step, last_step"
                      " FROM metric_rollup WHERE run_id=?1 AND col=?8 AND level=?7"
                      " AND bucket >= ?4 / ?7 AND bucket < ?5 / ?7"
                      " UNION ALL SELECT step, " +
                      col + ", " + col + ", " + col +
                      ", 1, step,"
                      " step FROM metrics WHERE run_id=?1 AND step >= max(?5, ?4) AND step <= ?3"
                      " AND " +
                      col +
                      " IS NOT NULL)"
                      " SELECT min(fs), max(ls), min(mn), max(mx), sum(sm) / sum(n), sum(n)"
                      " FROM parts GROUP BY (s - ?2) / ?6 ORDER BY 1")
                         .c_str());
      q.bind(1, id).bind(2, lo).bind(3, hi).bind(4, fullLo).bind(5, fullHi).bind(6, width);
      q.bind(7, level).bind(8, static_cast<int64_t>(column));
    }
  }
  while (q.step()) {
    MetricPoint p;
    p.firstStep = q.i64(0);
    p.lastStep = q.i64(1);
    p.min = q.f64(2);
    p.max = q.f64(3);
    p.mean = q.f64(4);
    p.count = q.i64(5);
    out.totalSteps += p.count;
    out.points.push_back(p);
  }
  return out;
}

std::vector<StepRow> RunStore::steps(int64_t id, std::optional<int64_t> fromStep,
                                     std::optional<int64_t> toStep) {
  std::lock_guard lock(impl_->mutex);
  auto s = impl_->db.prepare(
      "SELECT step, time, loss, lr, grad_norm, loss_scale, tokens, tokens_per_s, step_ms, skipped "
      "FROM metrics WHERE run_id=?1 AND step BETWEEN ?2 AND ?3 ORDER BY step");
  s.bind(1, id).bind(2, fromStep.value_or(INT64_MIN)).bind(3, toStep.value_or(INT64_MAX));
  std::vector<StepRow> out;
  while (s.step()) {
    StepRow r;
    r.step = s.i64(0);
    r.time = s.f64(1);
    r.loss = s.optF64(2);
    r.lr = s.optF64(3);
    r.gradNorm = s.optF64(4);
    r.lossScale = s.optF64(5);
    r.tokens = s.optI64(6);
    r.tokensPerS = s.optF64(7);
    r.stepMs = s.optF64(8);
    r.skipped = s.i64(9) != 0;
    out.push_back(r);
  }
  return out;
}

static json parseBody(const std::string& text) {
  try {
    return json::parse(text);
  } catch (const json::exception&) {
    return nullptr;
  }
}

std::vector<EvalRow> RunStore::evals(int64_t id) {
  std::lock_guard lock(impl_->mutex);
  auto s = impl_->db.prepare(
      "SELECT step, time, loss, body FROM evals WHERE run_id=? ORDER BY step, id");
  s.bind(1, id);
  std::vector<EvalRow> out;
  while (s.step()) out.push_back({s.i64(0), s.f64(1), s.optF64(2), parseBody(s.text(3))});
  return out;
}

std::vector<MemorySampleRow> RunStore::memorySamples(int64_t id, bool includePlan) {
  std::lock_guard lock(impl_->mutex);
  auto s = impl_->db.prepare(
      "SELECT seq, time, step, planned, rank, tier, category, current, peak FROM memory_samples "
      "WHERE run_id=?1 AND (?2 OR planned = 0) ORDER BY seq, id");
  s.bind(1, id).bind(2, static_cast<int64_t>(includePlan));
  std::vector<MemorySampleRow> out;
  while (s.step()) {
    MemorySampleRow r;
    r.seq = s.i64(0);
    r.time = s.f64(1);
    r.step = s.i64(2);
    r.planned = s.i64(3) != 0;
    r.rank = static_cast<int>(s.i64(4));
    r.tier = s.text(5);
    r.category = s.text(6);
    r.current = s.i64(7);
    r.peak = s.i64(8);
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<KernelSummaryRow> RunStore::kernelSummaries(int64_t id) {
  std::lock_guard lock(impl_->mutex);
  auto s = impl_->db.prepare(
      "SELECT seq, time, window, body FROM kernel_summaries WHERE run_id=? ORDER BY seq, id");
  s.bind(1, id);
  std::vector<KernelSummaryRow> out;
  while (s.step()) out.push_back({s.i64(0), s.f64(1), s.i64(2), parseBody(s.text(3))});
  return out;
}

std::vector<EventRow> RunStore::events(int64_t id, const std::vector<std::string>& types, int limit,
                                       int offset) {
  std::lock_guard lock(impl_->mutex);
  auto s = impl_->db.prepare(
      "SELECT seq, time, type, body FROM events WHERE run_id=?1 AND (?2 = '[]' OR type IN "
      "(SELECT value FROM json_each(?2))) ORDER BY seq, id LIMIT ?3 OFFSET ?4");
  s.bind(1, id).bind(2, json(types).dump()).bind(3, static_cast<int64_t>(limit));
  s.bind(4, static_cast<int64_t>(std::max(0, offset)));
  std::vector<EventRow> out;
  while (s.step()) out.push_back({s.i64(0), s.f64(1), s.text(2), parseBody(s.text(3))});
  return out;
}

std::vector<CheckpointRow> RunStore::checkpoints(int64_t id) {
  std::lock_guard lock(impl_->mutex);
  auto s = impl_->db.prepare(
      "SELECT step, time, path, checksum FROM checkpoints WHERE run_id=? ORDER BY step, id");
  s.bind(1, id);
  std::vector<CheckpointRow> out;
  while (s.step()) out.push_back({s.i64(0), s.f64(1), s.text(2), s.text(3)});
  return out;
}

std::vector<ArtifactRow> RunStore::artifacts(int64_t id) {
  std::lock_guard lock(impl_->mutex);
  auto s =
      impl_->db.prepare("SELECT id, kind, path, time FROM artifacts WHERE run_id=? ORDER BY id");
  s.bind(1, id);
  std::vector<ArtifactRow> out;
  while (s.step()) out.push_back({s.i64(0), s.text(1), s.text(2), s.f64(3)});
  return out;
}

RunComparison RunStore::compare(const std::vector<int64_t>& ids) {
  RunComparison out;
  std::vector<std::map<std::string, json>> flat;
  for (int64_t id : ids) {
    auto r = getRun(id);
    if (!r)
      throw StoreError(StoreError::Kind::BadInput,
                       "run " + std::to_string(id) + " is not in database " + path());
    flat.emplace_back();
    flatten(r->config, "", flat.back());
    out.runs.push_back(std::move(*r));
  }
  std::map<std::string, bool> paths;
  for (auto& f : flat)
    for (auto& [k, v] : f) paths[k] = true;
  for (auto& [p, _] : paths) {
    ConfigDifference d{p, {}};
    bool differs = false;
    for (auto& f : flat) {
      auto it = f.find(p);
      d.values.push_back(it == f.end() ? json(nullptr) : it->second);
      if (d.values.back() != d.values.front()) differs = true;
    }
    if (differs) out.configDifferences.push_back(std::move(d));
  }
  return out;
}

bool RunStore::rename(int64_t id, const std::string& name) {
  std::lock_guard lock(impl_->mutex);
  requireWritable(impl_->db);
  auto s = impl_->db.prepare("UPDATE runs SET name=? WHERE id=?");
  s.bind(1, name).bind(2, id).run();
  return impl_->db.changes() > 0;
}

bool RunStore::setTags(int64_t id, const std::vector<std::string>& tags) {
  std::lock_guard lock(impl_->mutex);
  requireWritable(impl_->db);
  std::vector<std::string> unique;
  for (auto& t : tags)
    if (!t.empty() && std::find(unique.begin(), unique.end(), t) == unique.end())
      unique.push_back(t);
  auto s = impl_->db.prepare("UPDATE runs SET tags=? WHERE id=?");
  s.bind(1, json(unique).dump()).bind(2, id).run();
  return impl_->db.changes() > 0;
}

bool RunStore::setNotes(int64_t id, const std::string& notes) {
  std::lock_guard lock(impl_->mutex);
  requireWritable(impl_->db);
  auto s = impl_->db.prepare("UPDATE runs SET notes=? WHERE id=?");
  s.bind(1, notes).bind(2, id).run();
  return impl_->db.changes() > 0;
}

int64_t RunStore::addArtifact(int64_t id, const std::string& kind, const std::string& path) {
  std::lock_guard lock(impl_->mutex);
  requireWritable(impl_->db);
  auto s = impl_->db.prepare(
      "INSERT INTO artifacts(run_id, kind, path, time) SELECT id, ?2, ?3, ?4 FROM runs "
      "WHERE id=?1");
  s.bind(1, id).bind(2, kind).bind(3, path).bind(4, store::nowSeconds()).run();
  return impl_->db.changes() > 0 ? impl_->db.lastInsertId() : 0;
}

static bool isInside(const fs::path& file, const fs::path& dir) {
  std::error_code ec;
  auto f = fs::weakly_canonical(file, ec);
  auto d = fs::weakly_canonical(dir, ec);
  auto rel = f.lexically_relative(d);
  return !rel.empty() && *rel.begin() != ".." && rel != ".";
}

bool RunStore::deleteRun(int64_t id, bool deleteFiles) {
  std::lock_guard lock(impl_->mutex);
  auto& db = impl_->db;
  requireWritable(db);
  std::string runDir;
  std::vector<std::string> files;
  {
    auto s = db.prepare("SELECT run_dir FROM runs WHERE id=?");
    s.bind(1, id);
    if (!s.step()) return false;
    runDir = s.text(0);
    auto a = db.prepare(
        "SELECT path FROM artifacts WHERE run_id=?1 UNION SELECT path FROM checkpoints "
        "WHERE run_id=?1");
    a.bind(1, id);
    while (a.step()) files.push_back(a.text(0));
  }
  bool sharedDir = false;
  {
    auto s = db.prepare("SELECT count(*) FROM runs WHERE run_dir=?1 AND id<>?2");
    s.bind(1, runDir).bind(2, id);
    s.step();
    sharedDir = s.i64(0) > 0;
  }
  {
    store::Transaction tx(db);
    auto s = db.prepare("DELETE FROM runs WHERE id=?");
    s.bind(1, id).run();
    tx.commit();
  }
  if (deleteFiles && !runDir.empty() && !sharedDir) {
    std::error_code ec;
    fs::path dir(runDir);
    fs::remove(dir / "events.ndjson", ec);
    fs::remove(dir / "recorder.json", ec);
    // Only files inside the run directory: never delete what lives elsewhere.
    for (auto& f : files)
      if (isInside(f, dir)) fs::remove_all(f, ec);
    if (fs::is_directory(dir, ec) && fs::is_empty(dir, ec)) fs::remove(dir, ec);
  }
  return true;
}

int RunStore::markCrashedRuns() {
  std::lock_guard lock(impl_->mutex);
  auto& db = impl_->db;
  if (db.readOnly()) return 0;
  {  // look first: an UPDATE would take the write lock even when nothing is dead
    auto q = db.prepare(
        "SELECT count(*) FROM runs WHERE status='running' AND ts_dead(host, pid, heartbeat)");
    q.step();
    if (q.i64(0) == 0) return 0;
  }
  auto s = db.prepare(
      "UPDATE runs SET status='crashed', reason=CASE WHEN reason='' THEN "
      "'the engine stopped without finishing (heartbeat lost)' ELSE reason END "
      "WHERE status='running' AND ts_dead(host, pid, heartbeat)");
  s.run();
  return db.changes();
}

RunStore::ImportResult RunStore::importEvents(const std::string& fileOrDir) {
  std::lock_guard lock(impl_->mutex);
  auto& db = impl_->db;
  requireWritable(db);
  std::error_code ec;
  fs::path file(fileOrDir);
  if (fs::is_directory(file, ec)) file /= "events.ndjson";
  std::ifstream in(file);
  if (!in)
    throw StoreError(StoreError::Kind::BadInput,
                     "cannot read events file " + file.string() +
                         " (give a run directory holding events.ndjson, or the file itself)");
  fs::path runDir = fs::weakly_canonical(fs::absolute(file).parent_path(), ec);

  store::RunMeta meta;
  meta.runDir = runDir.string();
  meta.created = store::nowSeconds();
  meta.status = "running";
  json rec;
  {
    std::ifstream rj(runDir / "recorder.json");
    if (rj) {
      try {
        rec = json::parse(rj);
      } catch (const json::exception&) {
      }
    }
  }
  if (rec.is_object()) {
    meta.name = rec.value("name", std::string());
    meta.backend = rec.value("backend", std::string());
    meta.ranks = rec.value("ranks", 1);
    meta.parentRun = rec.value("parent_run", int64_t{0});
    meta.teacherRun = rec.value("teacher_run", int64_t{0});
    meta.created = rec.value("created", meta.created);
  }

  ImportResult result;
  store::Transaction tx(db);
  int64_t runId = 0;
  {
    auto s = db.prepare("SELECT id FROM runs WHERE run_dir=? ORDER BY id DESC LIMIT 1");
    s.bind(1, meta.runDir);
    if (s.step()) runId = s.i64(0);
  }
  if (runId) {
    store::EventIngestor::clearRunData(db, runId);
    result.replaced = true;
  } else {
    // Parent/teacher ids from another database may not exist here.
    for (int64_t* ref : {&meta.parentRun, &meta.teacherRun}) {
      if (*ref <= 0) continue;
      auto s = db.prepare("SELECT 1 FROM runs WHERE id=?");
      s.bind(1, *ref);
      if (!s.step()) *ref = 0;
    }
    runId = store::EventIngestor::createRun(db, meta);
  }
  store::EventIngestor ing(db, runId);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line == "\r") continue;
    json e;
    try {
      e = json::parse(line);
    } catch (const json::exception&) {
      ++result.badLines;
      continue;
    }
    if (!e.is_object() || !e.contains("type") || !e["type"].is_string()) {
      ++result.badLines;
      continue;
    }
    ing.apply(e);
    ++result.events;
  }
  ing.endBatch(store::nowSeconds());
  if (!ing.sawFinished()) {
    auto s = db.prepare(
        "UPDATE runs SET status = 'crashed', reason = ?2 WHERE id = ?1 AND status = 'running' "
        "AND (pid IS NULL OR pid = 0 OR ts_dead(host, pid, 0))");
    s.bind(1, runId).bind(2, "imported from " + file.string() + ": no finished event");
    s.run();
  }
  if (!meta.name.empty() || !result.replaced) {
    // Name a run that has none after its directory.
    auto s = db.prepare("UPDATE runs SET name = ?2 WHERE id = ?1 AND name = ''");
    s.bind(1, runId).bind(2, runDir.filename().string());
    s.run();
  }
  tx.commit();
  result.runId = runId;
  return result;
}

nlohmann::json toJson(const StepRow& s) {
  auto opt = [](const auto& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  return {{"step", s.step},
          {"time", s.time},
          {"loss", opt(s.loss)},
          {"lr", opt(s.lr)},
          {"grad_norm", opt(s.gradNorm)},
          {"loss_scale", opt(s.lossScale)},
          {"tokens", opt(s.tokens)},
          {"tokens_per_s", opt(s.tokensPerS)},
          {"step_ms", opt(s.stepMs)},
          {"skipped", s.skipped}};
}

}  // namespace ts::core
