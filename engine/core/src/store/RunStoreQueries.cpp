// RunStore's queries over runs: the filtered, sorted list, one run's details, and comparing
// the configs of several runs.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include "trainscope/core/protocol/BoundedJson.h"

#include "RunStoreImpl.h"

using nlohmann::json;

namespace ts::core {

using store::Stmt;

namespace {

constexpr const char* kEffectiveStatus =
    "(CASE WHEN status = 'running' AND ts_dead(host, pid, heartbeat) THEN 'crashed' "
    "ELSE status END)";

std::string summaryColumns() {
  return std::string("id, name, tags, notes, created, started, finished, heartbeat, ") +
         kEffectiveStatus +
         ", reason, backend, ranks, steps, last_step, last_loss, best_eval_loss, tokens_per_s, "
         "peak_memory, parent_run, teacher_run, pid, host, run_dir, "
         // Evals are indexed by (run_id, step): this walks one run's evals from the newest. A
         // body that is not JSON (hand-written streams) or a non-numeric accuracy is skipped.
         "(SELECT json_extract(b, '$.accuracy') FROM (SELECT e.step AS st, e.id AS eid, CASE "
         "WHEN json_valid(e.body) THEN e.body ELSE '{}' END AS b FROM evals e WHERE e.run_id = "
         "runs.id) WHERE json_type(b, '$.accuracy') IN ('real', 'integer') ORDER BY st DESC, "
         "eid DESC LIMIT 1), "
         "EXISTS (SELECT 1 FROM events k WHERE k.run_id = runs.id AND k.type = 'kernels')";
}

void readSummary(Stmt& s, RunSummary& r) {
  r.id = s.i64(0);
  r.name = s.text(1);
  try {
    std::string text = s.text(2);
    auto tags = text == "[]" ? json::array() : parseBoundedJson(text);
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
  r.accuracy = s.optF64(23);
  r.profiled = s.i64(24) != 0;
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

RunDetail readDetail(Stmt& s) {
  RunDetail r;
  readSummary(s, r);
  if (!s.isNull(25)) {
    try {
      r.config = parseBoundedJson(s.text(25));
    } catch (const json::exception&) {
      r.config = nullptr;  // a damaged config must not hide the run
    }
  }
  return r;
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

}  // namespace ts::core
