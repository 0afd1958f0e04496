// RunStore's queries over one run's tables: metric series (downsampled through the rollups),
// steps, evals, memory samples, kernel summaries, events, checkpoints and artifacts.
#include <algorithm>
#include "trainscope/core/protocol/BoundedJson.h"

#include "RunStoreImpl.h"

using nlohmann::json;

namespace ts::core {

using store::Db;
using store::Stmt;

namespace {

json parseBody(const std::string& text) {
  try {
    return parseBoundedJson(text);
  } catch (const json::exception&) {
    return nullptr;
  }
}

// One point per step: [lo, hi] holds at most maxPoints steps.
Stmt pointQuery(Db& db, int64_t id, const std::string& col, int64_t lo, int64_t hi) {
  Stmt q = db.prepare(("SELECT step, step, " + col + ", " + col + ", " + col +
                       ", 1 FROM metrics WHERE run_id=?1 AND step BETWEEN ?2 AND ?3 AND " + col +
                       " IS NOT NULL ORDER BY step")
                          .c_str());
  q.bind(1, id).bind(2, lo).bind(3, hi);
  return q;
}

// Buckets of `width` steps over [lo, hi]: min/max/mean each, read from the rollup pyramid where
// a level fits the width (ceil(span / maxPoints) steps).
Stmt bucketQuery(Db& db, int64_t id, MetricColumn column, const std::string& col, int64_t lo,
                 int64_t hi, int64_t width) {
  Stmt q;
  int64_t level = 0;
  for (int64_t l : store::kRollupLevels)
    if (l <= 2 * width) level = l;  // coarser is fine: >= maxPoints / 2 buckets, fewer rows
  if (level == 0) {
    // Narrow buckets: aggregate the raw rows (fewer than 8 * maxPoints of them).
    q = db.prepare(("SELECT min(step), max(step), min(" + col + "), max(" + col + "), avg(" + col +
                    "), count(" + col +
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
  return q;
}

}  // namespace

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
    q = pointQuery(db, id, col, lo, hi);
  } else {
    out.downsampled = true;
    q = bucketQuery(db, id, column, col, lo, hi, (span + maxPoints - 1) / maxPoints);
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

std::vector<EvalRow> RunStore::evals(int64_t id) {
  std::lock_guard lock(impl_->mutex);
  auto s = impl_->db.prepare(
      "SELECT step, time, loss, body FROM evals WHERE run_id=? ORDER BY step, id");
  s.bind(1, id);
  std::vector<EvalRow> out;
  while (s.step()) out.push_back({s.i64(0), s.f64(1), s.optF64(2), parseBody(s.text(3))});
  return out;
}

std::vector<MemorySampleRow> RunStore::memorySamples(int64_t id, bool includePlan,
                                                     int64_t afterSeq) {
  std::lock_guard lock(impl_->mutex);
  auto s = impl_->db.prepare(
      "SELECT seq, time, step, planned, rank, tier, category, current, peak FROM memory_samples "
      "WHERE run_id=?1 AND (?2 OR planned = 0) AND seq > ?3 ORDER BY seq, id");
  s.bind(1, id).bind(2, static_cast<int64_t>(includePlan)).bind(3, afterSeq);
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
