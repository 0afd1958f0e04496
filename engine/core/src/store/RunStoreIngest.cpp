// Event ingestion: protocol events -> run store rows (shared by RunRecorder and `runs import`).
#include <algorithm>

#include "RunStoreDb.h"

namespace ts::core::store {

using nlohmann::json;

const char* metricSqlColumn(MetricColumn c) {
  switch (c) {
    case MetricColumn::Loss:
      return "loss";
    case MetricColumn::Lr:
      return "lr";
    case MetricColumn::GradNorm:
      return "grad_norm";
    case MetricColumn::LossScale:
      return "loss_scale";
    case MetricColumn::Tokens:
      return "tokens";
    case MetricColumn::TokensPerS:
      return "tokens_per_s";
    case MetricColumn::StepMs:
      return "step_ms";
    case MetricColumn::Skipped:
      return "skipped";
  }
  return "loss";
}

namespace {

std::optional<double> num(const json& e, const char* key) {
  auto it = e.find(key);
  if (it == e.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}
std::optional<int64_t> int64Of(const json& e, const char* key) {
  auto it = e.find(key);
  if (it == e.end() || !it->is_number()) return std::nullopt;
  return it->is_number_float() ? static_cast<int64_t>(it->get<double>()) : it->get<int64_t>();
}
std::optional<std::string> str(const json& e, const char* key) {
  auto it = e.find(key);
  if (it == e.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

int64_t floorDiv(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

}  // namespace

void updateRollups(Db& db, int64_t runId, int64_t fromStep, int64_t toStep, bool recomputeBase) {
  constexpr int64_t base = kRollupLevels[0];
  for (auto c : allMetricColumns()) {
    if (!recomputeBase) break;
    const char* col = metricSqlColumn(c);
    std::string sql =
        std::string(
            "INSERT OR REPLACE INTO metric_rollup(run_id,col,level,bucket,mn,mx,sm,n,"
            "first_step,last_step) SELECT ?1, ?2, ?3, step/?3, min(") +
        col + "), max(" + col + "), sum(" + col + "), count(" + col +
        "), min(step), max(step) FROM metrics WHERE run_id=?1 AND step BETWEEN ?4 AND ?5 AND " +
        col + " IS NOT NULL GROUP BY step/?3";
    auto ins = db.prepare(sql.c_str());
    ins.bind(1, runId).bind(2, static_cast<int64_t>(c)).bind(3, base);
    ins.bind(4, floorDiv(fromStep, base) * base).bind(5, floorDiv(toStep, base) * base + base - 1);
    ins.run();
  }
  // Per column, so every statement is a range on the primary key (run_id, col, level, bucket).
  auto del = db.prepare(
      "DELETE FROM metric_rollup WHERE run_id=?1 AND col=?5 AND level=?2 AND bucket BETWEEN ?3 "
      "AND ?4");
  auto up = db.prepare(
      "INSERT INTO metric_rollup(run_id,col,level,bucket,mn,mx,sm,n,first_step,last_step) "
      "SELECT ?1, ?6, ?2, bucket/16, min(mn), max(mx), sum(sm), sum(n), min(first_step), "
      "max(last_step) FROM metric_rollup WHERE run_id=?1 AND col=?6 AND level=?5 AND bucket "
      "BETWEEN ?3 AND ?4 GROUP BY bucket/16");
  for (size_t i = 1; i < std::size(kRollupLevels); ++i) {
    int64_t level = kRollupLevels[i];
    int64_t lo = floorDiv(fromStep, level), hi = floorDiv(toStep, level);
    for (auto c : allMetricColumns()) {
      del.bind(1, runId).bind(2, level).bind(3, lo).bind(4, hi).bind(5, static_cast<int64_t>(c));
      del.run();
      up.bind(1, runId).bind(2, level).bind(3, lo * 16).bind(4, hi * 16 + 15);
      up.bind(5, kRollupLevels[i - 1]).bind(6, static_cast<int64_t>(c));
      up.run();
    }
  }
}

int64_t EventIngestor::createRun(Db& db, const RunMeta& m) {
  auto s = db.prepare(
      "INSERT INTO runs(name, created, status, backend, ranks, parent_run, teacher_run, pid, "
      "heartbeat, run_dir, host) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?2, ?9, ?10)");
  s.bind(1, m.name).bind(2, m.created).bind(3, m.status).bind(4, m.backend).bind(5, m.ranks);
  if (m.parentRun > 0)
    s.bind(6, m.parentRun);
  else
    s.bind(6, nullptr);
  if (m.teacherRun > 0)
    s.bind(7, m.teacherRun);
  else
    s.bind(7, nullptr);
  s.bind(8, m.pid).bind(9, m.runDir).bind(10, m.host);
  s.run();
  return db.lastInsertId();
}

void EventIngestor::clearRunData(Db& db, int64_t runId) {
  for (const char* t : {"metrics", "metric_rollup", "evals", "memory_samples", "kernel_summaries",
                        "events", "checkpoints"}) {
    auto s = db.prepare((std::string("DELETE FROM ") + t + " WHERE run_id=?1").c_str());
    s.bind(1, runId).run();
  }
  auto s = db.prepare(
      "UPDATE runs SET steps=0, last_step=NULL, last_loss=NULL, tokens_per_s=NULL, "
      "best_eval_loss=NULL, peak_memory=0, started=NULL, finished=NULL WHERE id=?1");
  s.bind(1, runId).run();
}

EventIngestor::EventIngestor(Db& db, int64_t runId)
    : db_(db),
      runId_(runId),
      insMetric_(db.prepare(
          "INSERT OR REPLACE INTO metrics(run_id, step, time, loss, lr, grad_norm, loss_scale, "
          "tokens, tokens_per_s, step_ms, skipped) VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11)")),
      insEval_(
          db.prepare("INSERT INTO evals(run_id, step, time, loss, body) VALUES(?1,?2,?3,?4,?5)")),
      insMem_(db.prepare(
          "INSERT INTO memory_samples(run_id, seq, time, step, planned, rank, tier, category, "
          "current, peak) VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10)")),
      insKernel_(db.prepare(
          "INSERT INTO kernel_summaries(run_id, seq, time, window, body) VALUES(?1,?2,?3,?4,?5)")),
      insEvent_(
          db.prepare("INSERT INTO events(run_id, seq, time, type, body) VALUES(?1,?2,?3,?4,?5)")),
      insCheckpoint_(db.prepare(
          "INSERT INTO checkpoints(run_id, step, time, path, checksum) VALUES(?1,?2,?3,?4,?5)")) {}

void EventIngestor::apply(const json& e) {
  if (!e.is_object()) return;
  std::string type = str(e, "type").value_or("");
  int64_t seq = int64Of(e, "seq").value_or(0);
  double time = num(e, "time").value_or(0.0);
  if (!started_ && time > 0) started_ = time;

  if (type == "step") {
    applyStep(e, time);
  } else if (type == "memory") {
    applyMemory(e, seq, time, false);
  } else if (type == "memory_plan") {
    applyMemory(e, seq, time, true);
    storeEvent(type, seq, time, e);
  } else if (type == "kernel_summary") {
    insKernel_.bind(1, runId_).bind(2, seq).bind(3, time);
    insKernel_.bind(4, int64Of(e, "window").value_or(0)).bind(5, e.dump());
    insKernel_.run();
  } else {
    if (type == "eval") {
      // `val_loss` is the protocol's field (docs/protocol.md); `loss` and `eval_loss` are
      // accepted from older or hand-written streams.
      auto loss = num(e, "val_loss");
      if (!loss) loss = num(e, "loss");
      if (!loss) loss = num(e, "eval_loss");
      insEval_.bind(1, runId_).bind(2, int64Of(e, "step").value_or(-1)).bind(3, time);
      insEval_.bind(4, loss).bind(5, e.dump());
      insEval_.run();
      if (loss && (!bestEval_ || *loss < *bestEval_)) bestEval_ = loss;
    } else if (type == "checkpoint") {
      insCheckpoint_.bind(1, runId_).bind(2, int64Of(e, "step").value_or(-1)).bind(3, time);
      insCheckpoint_.bind(4, str(e, "path").value_or("")).bind(5, str(e, "checksum").value_or(""));
      insCheckpoint_.run();
    } else if (type == "hello") {
      if (auto b = str(e, "backend")) backend_ = b;
      if (auto r = int64Of(e, "ranks")) ranks_ = r;
      if (time > 0) started_ = time;
    } else if (type == "config") {
      auto it = e.find("config");
      json cfg = it != e.end() ? *it : json::object();
      if (it == e.end())
        for (auto& [k, v] : e.items())
          if (k != "type" && k != "seq" && k != "time") cfg[k] = v;
      configText_ = cfg.dump();
      if (cfg.is_object()) {
        if (auto n = str(cfg, "name")) configName_ = n;
        // The config's tags and notes become the run's (bound parameters, any text is data).
        if (auto t = cfg.find("tags"); t != cfg.end() && t->is_array()) {
          json tags = json::array();
          for (const auto& v : *t)
            if (v.is_string()) tags.push_back(v);
          if (!tags.empty()) configTags_ = tags.dump();
        }
        if (auto n = str(cfg, "notes"); n && !n->empty()) configNotes_ = n;
      }
    } else if (type == "finished") {
      std::string st = str(e, "status").value_or("failed");
      if (st != "completed" && st != "stopped" && st != "failed") st = "failed";
      status_ = st;
      reason_ = str(e, "reason").value_or("");
      finished_ = time > 0 ? time : nowSeconds();
      sawFinished_ = true;
    }
    storeEvent(type, seq, time, e);
  }
}

void EventIngestor::applyStep(const json& e, double time) {
  auto step = int64Of(e, "step");
  if (!step) return;  // a step event without a step number cannot be placed on the curve
  auto loss = num(e, "loss");
  auto tps = num(e, "tokens_per_s");
  bool skipped = false;
  if (auto it = e.find("skipped"); it != e.end())
    skipped = it->is_boolean() ? it->get<bool>() : (it->is_number() && it->get<double>() != 0);
  insMetric_.bind(1, runId_).bind(2, *step).bind(3, time).bind(4, loss).bind(5, num(e, "lr"));
  insMetric_.bind(6, num(e, "grad_norm")).bind(7, num(e, "loss_scale"));
  insMetric_.bind(8, int64Of(e, "tokens")).bind(9, tps).bind(10, num(e, "step_ms"));
  insMetric_.bind(11, static_cast<int64_t>(skipped ? 1 : 0));
  insMetric_.run();
  if (*step <= maxStepSeen_) outOfOrder_ = true;
  maxStepSeen_ = std::max(maxStepSeen_, *step);
  if (!outOfOrder_) {
    const std::optional<double> values[8] = {
        loss, num(e, "lr"),      num(e, "grad_norm"), num(e, "loss_scale"), num(e, "tokens"),
        tps,  num(e, "step_ms"), skipped ? 1.0 : 0.0};
    int64_t b = floorDiv(*step, kRollupLevels[0]);
    for (int c = 0; c < 8; ++c) {
      if (!values[c]) continue;
      double v = *values[c];
      auto& list = buckets_[c];
      if (list.empty() || list.back().bucket != b) list.push_back({b, v, v, 0, 0, *step, *step});
      auto& k = list.back();
      k.mn = std::min(k.mn, v);
      k.mx = std::max(k.mx, v);
      k.sm += v;
      ++k.n;
      k.lastStep = *step;
    }
  }
  ++batchSteps_;
  if (!batchMinStep_ || *step < *batchMinStep_) batchMinStep_ = step;
  if (!batchMaxStep_ || *step >= *batchMaxStep_) {
    batchMaxStep_ = step;
    lastLoss_ = loss;
    lastTps_ = tps;
  }
}

void EventIngestor::applyMemory(const json& e, int64_t seq, double time, bool planned) {
  auto ranks = e.find("ranks");
  if (ranks == e.end() || !ranks->is_array()) return;
  auto step = int64Of(e, "step").value_or(-1);
  for (const auto& r : *ranks) {
    if (!r.is_object()) continue;
    int rank = static_cast<int>(int64Of(r, "rank").value_or(0));
    auto tiers = r.find("tiers");
    if (tiers == r.end() || !tiers->is_object()) continue;
    int64_t devicePeak = 0;
    for (auto& [tier, cats] : tiers->items()) {
      if (!cats.is_object()) continue;
      for (auto& [cat, v] : cats.items()) {
        if (!v.is_object()) continue;
        int64_t cur = int64Of(v, "current").value_or(0), peak = int64Of(v, "peak").value_or(0);
        insMem_.bind(1, runId_).bind(2, seq).bind(3, time).bind(4, step);
        insMem_.bind(5, static_cast<int64_t>(planned ? 1 : 0)).bind(6, rank);
        insMem_.bind(7, tier).bind(8, cat).bind(9, cur).bind(10, peak);
        insMem_.run();
        if (tier == "device") devicePeak += peak;
      }
    }
    if (!planned) peakMemory_ = std::max(peakMemory_, devicePeak);
  }
}

void EventIngestor::storeEvent(const std::string& type, int64_t seq, double time, const json& e) {
  insEvent_.bind(1, runId_).bind(2, seq).bind(3, time).bind(4, type).bind(5, e.dump());
  insEvent_.run();
}

void EventIngestor::endBatch(double heartbeat) {
  if (batchSteps_ > 0) {
    if (outOfOrder_) {
      updateRollups(db_, runId_, *batchMinStep_, *batchMaxStep_);
    } else {
      // Merge this batch's base buckets into the stored ones (a bucket may span batches).
      auto up = db_.prepare(
          "INSERT INTO metric_rollup(run_id,col,level,bucket,mn,mx,sm,n,first_step,last_step) "
          "VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10) ON CONFLICT(run_id,col,level,bucket) DO UPDATE "
          "SET mn=min(mn,excluded.mn), mx=max(mx,excluded.mx), sm=sm+excluded.sm, "
          "n=n+excluded.n, first_step=min(first_step,excluded.first_step), "
          "last_step=max(last_step,excluded.last_step)");
      for (int c = 0; c < 8; ++c)
        for (auto& k : buckets_[c]) {
          up.bind(1, runId_).bind(2, static_cast<int64_t>(c)).bind(3, kRollupLevels[0]);
          up.bind(4, k.bucket).bind(5, k.mn).bind(6, k.mx).bind(7, k.sm).bind(8, k.n);
          up.bind(9, k.firstStep).bind(10, k.lastStep);
          up.run();
        }
      updateRollups(db_, runId_, *batchMinStep_, *batchMaxStep_, /*recomputeBase=*/false);
    }
  }
  for (auto& list : buckets_) list.clear();
  outOfOrder_ = false;
  auto s = db_.prepare(
      "UPDATE runs SET steps = steps + ?2, "
      "last_loss = CASE WHEN ?3 IS NOT NULL AND ?3 >= coalesce(last_step, -1) THEN ?4 "
      "  ELSE last_loss END, "
      "tokens_per_s = CASE WHEN ?3 IS NOT NULL AND ?3 >= coalesce(last_step, -1) THEN ?5 "
      "  ELSE tokens_per_s END, "
      "last_step = CASE WHEN ?3 IS NOT NULL AND ?3 >= coalesce(last_step, -1) THEN ?3 "
      "  ELSE last_step END, "
      "best_eval_loss = CASE WHEN ?6 IS NULL THEN best_eval_loss "
      "  WHEN best_eval_loss IS NULL OR ?6 < best_eval_loss THEN ?6 ELSE best_eval_loss END, "
      "peak_memory = max(peak_memory, ?7), started = coalesce(started, ?8), "
      "finished = coalesce(?9, finished), status = coalesce(?10, status), "
      "reason = coalesce(?11, reason), backend = coalesce(?12, backend), "
      "ranks = coalesce(?13, ranks), config = coalesce(?14, config), "
      "name = CASE WHEN name = '' AND ?15 IS NOT NULL THEN ?15 ELSE name END, "
      "tags = CASE WHEN tags = '[]' AND ?17 IS NOT NULL THEN ?17 ELSE tags END, "
      "notes = CASE WHEN notes = '' AND ?18 IS NOT NULL THEN ?18 ELSE notes END, "
      "heartbeat = ?16 WHERE id = ?1");
  s.bind(1, runId_).bind(2, batchSteps_).bind(3, batchMaxStep_).bind(4, lastLoss_);
  s.bind(5, lastTps_).bind(6, bestEval_).bind(7, peakMemory_).bind(8, started_);
  s.bind(9, finished_);
  auto bindStr = [&](int i, const std::optional<std::string>& v) {
    if (v)
      s.bind(i, *v);
    else
      s.bind(i, nullptr);
  };
  bindStr(10, status_);
  bindStr(11, reason_);
  bindStr(12, backend_);
  s.bind(13, ranks_);
  bindStr(14, configText_);
  bindStr(15, configName_);
  s.bind(16, heartbeat);
  bindStr(17, configTags_);
  bindStr(18, configNotes_);
  s.run();
  batchSteps_ = 0;
  batchMinStep_.reset();
  batchMaxStep_.reset();
  lastLoss_.reset();
  lastTps_.reset();
  bestEval_.reset();
  status_.reset();
  reason_.reset();
  backend_.reset();
  configText_.reset();
  configName_.reset();
  configTags_.reset();
  configNotes_.reset();
  ranks_.reset();
  finished_.reset();
  // started_ and peakMemory_ are kept (coalesce / max make re-sending them harmless)
}

}  // namespace ts::core::store
