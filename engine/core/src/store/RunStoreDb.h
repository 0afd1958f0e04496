#pragma once
// Internal to the run store: a thin RAII layer over the sqlite3 C API (every value goes through
// bound parameters), the schema with its migrations, and the event ingestor shared by the
// recorder and `runs import`.
#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainscope/core/store/RunStore.h"

namespace ts::core::store {

// Maps an SQLite result code to the store's error kinds.
StoreError::Kind kindOf(int sqliteCode);
std::string describe(StoreError::Kind kind);

class Stmt {
 public:
  Stmt() = default;
  Stmt(sqlite3* db, const char* sql);
  Stmt(Stmt&& o) noexcept : db_(o.db_), st_(o.st_) { o.st_ = nullptr; }
  Stmt& operator=(Stmt&& o) noexcept;
  Stmt(const Stmt&) = delete;
  ~Stmt();

  Stmt& bind(int i, int64_t v);
  Stmt& bind(int i, int v) { return bind(i, static_cast<int64_t>(v)); }
  Stmt& bind(int i, double v);
  Stmt& bind(int i, const std::string& v);
  Stmt& bind(int i, std::nullptr_t);
  Stmt& bind(int i, const std::optional<double>& v) { return v ? bind(i, *v) : bind(i, nullptr); }
  Stmt& bind(int i, const std::optional<int64_t>& v) { return v ? bind(i, *v) : bind(i, nullptr); }
  bool step();  // true: a row is available; throws StoreError on failure
  void run() {
    step();
    reset();
  }
  void reset();

  bool isNull(int c) const { return sqlite3_column_type(st_, c) == SQLITE_NULL; }
  int64_t i64(int c) const { return sqlite3_column_int64(st_, c); }
  double f64(int c) const { return sqlite3_column_double(st_, c); }
  std::string text(int c) const;
  std::optional<double> optF64(int c) const {
    return isNull(c) ? std::nullopt : std::optional<double>(f64(c));
  }
  std::optional<int64_t> optI64(int c) const {
    return isNull(c) ? std::nullopt : std::optional<int64_t>(i64(c));
  }

 private:
  sqlite3* db_ = nullptr;
  sqlite3_stmt* st_ = nullptr;
};

// One connection. Throws StoreError (naming the file) for anything that goes wrong.
class Db {
 public:
  Db(const std::string& path, bool readOnly, bool create, int busyTimeoutMs,
     double staleAfterSeconds);
  ~Db();
  Db(const Db&) = delete;

  sqlite3* handle() const { return db_; }
  const std::string& path() const { return path_; }
  bool readOnly() const { return readOnly_; }
  int busyTimeoutMs() const { return busyTimeoutMs_; }
  void exec(const char* sql);
  Stmt prepare(const char* sql) { return Stmt(db_, sql); }
  [[noreturn]] void fail(int code, const std::string& what) const;
  int64_t lastInsertId() const { return sqlite3_last_insert_rowid(db_); }
  int changes() const { return sqlite3_changes(db_); }

  int userVersion();
  // Brings the schema to kRunStoreSchemaVersion (read-write) or checks it is current.
  void migrate();
  void setMaxPageCount(int64_t pages);

  double staleAfterSeconds = 15;

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
  bool readOnly_;
  int busyTimeoutMs_;
};

// RAII transaction (BEGIN IMMEDIATE so two writers queue on the busy timeout instead of
// deadlocking on a lock upgrade).
class Transaction {
 public:
  explicit Transaction(Db& db);
  ~Transaction();
  void commit();

 private:
  Db& db_;
  bool done_ = false;
};

double nowSeconds();
std::string hostName();
bool processAlive(int64_t pid);

// Levels of the metric rollup pyramid (steps per bucket).
inline constexpr int64_t kRollupLevels[] = {16, 256, 4096, 65536};
const char* metricSqlColumn(MetricColumn c);  // whitelist: the only column names put in SQL

struct RunMeta {
  std::string name, backend, runDir, host;
  int ranks = 1;
  int64_t parentRun = 0, teacherRun = 0, pid = 0;
  double created = 0;
  std::string status = "running";
};

// Applies protocol events to one run. Call inside a transaction; endBatch() updates the
// rollups and the run's summary columns for everything applied since the last endBatch().
class EventIngestor {
 public:
  EventIngestor(Db& db, int64_t runId);
  static int64_t createRun(Db& db, const RunMeta& meta);
  static void clearRunData(Db& db, int64_t runId);  // everything but the runs row

  void apply(const nlohmann::json& event);
  void endBatch(double heartbeat);
  bool sawFinished() const { return sawFinished_; }
  int64_t runId() const { return runId_; }

 private:
  void applyStep(const nlohmann::json& e, double time);
  void applyMemory(const nlohmann::json& e, int64_t seq, double time, bool planned);
  void storeEvent(const std::string& type, int64_t seq, double time, const nlohmann::json& e);

  Db& db_;
  int64_t runId_;
  Stmt insMetric_, insEval_, insMem_, insKernel_, insEvent_, insCheckpoint_;
  // pending summary for the batch
  int64_t batchSteps_ = 0;
  std::optional<int64_t> batchMinStep_, batchMaxStep_;
  // Level-0 rollup buckets of this batch, aggregated here while steps arrive in order (the
  // common case); any out-of-order/repeated step makes endBatch recompute the range in SQL.
  struct Bucket {
    int64_t bucket = 0;
    double mn = 0, mx = 0, sm = 0;
    int64_t n = 0, firstStep = 0, lastStep = 0;
  };
  std::vector<Bucket> buckets_[8];
  int64_t maxStepSeen_ = -1;
  bool outOfOrder_ = false;
  std::optional<double> lastLoss_, lastTps_;
  std::optional<double> bestEval_;
  int64_t peakMemory_ = 0;
  std::optional<double> started_, finished_;
  std::optional<std::string> status_, reason_, backend_, configText_, configName_;
  std::optional<std::string> configTags_, configNotes_;  // the config's, until the user sets own
  std::optional<int64_t> ranks_;
  bool sawFinished_ = false;
};

// Rebuilds the rollup buckets covering [fromStep, toStep] for one run. With recomputeBase
// false the base level is taken as already up to date (only the coarser levels are rebuilt).
void updateRollups(Db& db, int64_t runId, int64_t fromStep, int64_t toStep,
                   bool recomputeBase = true);

}  // namespace ts::core::store
