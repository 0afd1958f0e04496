#include "RunStoreDb.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

namespace ts::core::store {

StoreError::Kind kindOf(int code) {
  switch (code & 0xff) {
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
      return StoreError::Kind::Corrupt;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return StoreError::Kind::Locked;
    case SQLITE_READONLY:
      return StoreError::Kind::ReadOnly;
    case SQLITE_FULL:
      return StoreError::Kind::Full;
    case SQLITE_CANTOPEN:
      return StoreError::Kind::NotFound;
    default:
      return StoreError::Kind::Other;
  }
}

std::string describe(StoreError::Kind kind) {
  switch (kind) {
    case StoreError::Kind::NotFound:
      return "cannot be opened";
    case StoreError::Kind::Corrupt:
      return "is corrupted or not a database";
    case StoreError::Kind::Locked:
      return "is locked by another process past the busy timeout";
    case StoreError::Kind::ReadOnly:
      return "is read-only";
    case StoreError::Kind::Full:
      return "is full (disk or size limit reached)";
    case StoreError::Kind::TooNew:
      return "was written by a newer Trainscope";
    case StoreError::Kind::NeedsMigration:
      return "needs a schema migration";
    case StoreError::Kind::BadInput:
      return "was given bad input";
    case StoreError::Kind::Other:
      return "failed";
  }
  return "failed";
}

// ---------------------------------------------------------------------------------- Stmt

Stmt::Stmt(sqlite3* db, const char* sql) : db_(db) {
  int rc = sqlite3_prepare_v2(db, sql, -1, &st_, nullptr);
  if (rc != SQLITE_OK) {
    std::string file = sqlite3_db_filename(db, "main") ? sqlite3_db_filename(db, "main") : "";
    auto kind = kindOf(sqlite3_extended_errcode(db));
    throw StoreError(kind, "database " + file + " " + describe(kind) + ": " + sqlite3_errmsg(db));
  }
}

Stmt& Stmt::operator=(Stmt&& o) noexcept {
  if (this != &o) {
    if (st_) sqlite3_finalize(st_);
    db_ = o.db_;
    st_ = o.st_;
    o.st_ = nullptr;
  }
  return *this;
}

Stmt::~Stmt() {
  if (st_) sqlite3_finalize(st_);
}

Stmt& Stmt::bind(int i, int64_t v) {
  sqlite3_bind_int64(st_, i, v);
  return *this;
}
Stmt& Stmt::bind(int i, double v) {
  sqlite3_bind_double(st_, i, v);
  return *this;
}
Stmt& Stmt::bind(int i, const std::string& v) {
  sqlite3_bind_text(st_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  return *this;
}
Stmt& Stmt::bind(int i, std::nullptr_t) {
  sqlite3_bind_null(st_, i);
  return *this;
}

bool Stmt::step() {
  int rc = sqlite3_step(st_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  int ext = sqlite3_extended_errcode(db_);
  std::string msg = sqlite3_errmsg(db_);
  sqlite3_reset(st_);
  std::string file = sqlite3_db_filename(db_, "main") ? sqlite3_db_filename(db_, "main") : "";
  auto kind = kindOf(ext);
  throw StoreError(kind, "database " + file + " " + describe(kind) + ": " + msg);
}

void Stmt::reset() {
  sqlite3_reset(st_);
  sqlite3_clear_bindings(st_);
}

std::string Stmt::text(int c) const {
  auto* p = reinterpret_cast<const char*>(sqlite3_column_text(st_, c));
  return p ? std::string(p, sqlite3_column_bytes(st_, c)) : std::string();
}

// ---------------------------------------------------------------------------------- helpers

double nowSeconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string hostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

bool processAlive(int64_t pid) {
  if (pid <= 0) return false;
  if (kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
  // A zombie (exited, not yet reaped) is dead for our purposes.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string content;
  if (stat && std::getline(stat, content)) {
    auto close = content.rfind(')');
    if (close != std::string::npos && close + 2 < content.size() && content[close + 2] == 'Z')
      return false;
  }
  return true;
}

// ts_dead(host, pid, heartbeat): 1 when a `running` run's writer is gone.
static void tsDeadFn(sqlite3_context* ctx, int, sqlite3_value** argv) {
  auto* db = static_cast<Db*>(sqlite3_user_data(ctx));
  const char* host = reinterpret_cast<const char*>(sqlite3_value_text(argv[0]));
  int64_t pid = sqlite3_value_int64(argv[1]);
  double hb = sqlite3_value_double(argv[2]);
  double age = nowSeconds() - hb;
  bool dead = false;
  static const std::string self = hostName();
  if (host && self == host) {
    dead = age > db->staleAfterSeconds && !processAlive(pid);
  } else {
    dead = age > 4 * db->staleAfterSeconds;
  }
  sqlite3_result_int(ctx, dead ? 1 : 0);
}

// ---------------------------------------------------------------------------------- Db

Db::Db(const std::string& path, bool readOnly, bool create, int busyTimeoutMs, double staleAfter)
    : staleAfterSeconds(staleAfter),
      path_(path),
      readOnly_(readOnly),
      busyTimeoutMs_(busyTimeoutMs) {
  if (path.empty()) throw StoreError(StoreError::Kind::BadInput, "database path is empty");
  std::error_code ec;
  bool exists = fs::exists(path, ec);
  if (!exists && (readOnly || !create))
    throw StoreError(StoreError::Kind::NotFound, "database " + path + " does not exist");
  if (!exists) {
    auto parent = fs::path(path).parent_path();
    if (!parent.empty()) {
      fs::create_directories(parent, ec);
      if (ec)
        throw StoreError(StoreError::Kind::ReadOnly, "database " + path +
                                                         ": cannot create directory " +
                                                         parent.string() + ": " + ec.message());
    }
  }
  if (!exists) {
    // SQLite would create the file 0644 whatever the umask allows; created here with 0666 the
    // user's umask decides, and SQLite gives the -wal and -shm files the database's mode.
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd >= 0) ::close(fd);
  }
  int flags = readOnly ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  flags |= SQLITE_OPEN_NOMUTEX;
  int rc = sqlite3_open_v2(path.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    auto kind = kindOf(rc);
    // Cannot create a file in a read-only directory: say read-only.
    if (kind == StoreError::Kind::NotFound && !readOnly) kind = StoreError::Kind::ReadOnly;
    throw StoreError(kind, "database " + path + " " + describe(kind) + ": " + msg);
  }
  sqlite3_extended_result_codes(db_, 1);
  sqlite3_busy_timeout(db_, busyTimeoutMs);
  sqlite3_create_function(db_, "ts_dead", 3, SQLITE_UTF8, this, tsDeadFn, nullptr, nullptr);
  try {
    if (!readOnly && sqlite3_db_readonly(db_, "main") == 1)
      throw StoreError(StoreError::Kind::ReadOnly,
                       "database " + path + " is read-only (file or directory not writable)");
    // The first real read detects a file that is not a database.
    exec("PRAGMA foreign_keys=ON");
    if (!readOnly) {
      Stmt wal(db_, "PRAGMA journal_mode=WAL");
      wal.step();
      std::string mode = wal.text(0);
      if (mode != "wal")
        throw StoreError(StoreError::Kind::ReadOnly, "database " + path +
                                                         " cannot use WAL mode (got '" + mode +
                                                         "'); is its directory writable?");
      exec("PRAGMA synchronous=NORMAL");
    }
    Stmt probe(db_, "SELECT count(*) FROM sqlite_master");
    probe.step();
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
}

Db::~Db() {
  if (db_) sqlite3_close(db_);
}

void Db::fail(int code, const std::string& what) const {
  auto kind = kindOf(code);
  throw StoreError(
      kind, "database " + path_ + " " + describe(kind) + " (" + what + "): " + sqlite3_errmsg(db_));
}

void Db::exec(const char* sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string msg = err ? err : "";
    sqlite3_free(err);
    auto kind = kindOf(sqlite3_extended_errcode(db_));
    std::string extra = kind == StoreError::Kind::Locked
                            ? " (waited " + std::to_string(busyTimeoutMs_) + " ms)"
                            : "";
    throw StoreError(kind, "database " + path_ + " " + describe(kind) + extra + ": " + msg);
  }
}

int Db::userVersion() {
  Stmt s(db_, "PRAGMA user_version");
  s.step();
  return static_cast<int>(s.i64(0));
}

void Db::setMaxPageCount(int64_t pages) {
  Stmt s(db_, ("PRAGMA max_page_count=" + std::to_string(pages)).c_str());
  s.step();
}

// ---------------------------------------------------------------------------------- schema

namespace {

// v1: the first released schema. Never edit: later versions migrate forward from it.
const char* kSchemaV1 = R"sql(
CREATE TABLE runs(
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL DEFAULT '',
  tags TEXT NOT NULL DEFAULT '[]',
  notes TEXT NOT NULL DEFAULT '',
  created REAL NOT NULL,
  started REAL,
  finished REAL,
  status TEXT NOT NULL DEFAULT 'running',
  backend TEXT NOT NULL DEFAULT '',
  ranks INTEGER NOT NULL DEFAULT 1,
  config TEXT,
  parent_run INTEGER REFERENCES runs(id) ON DELETE SET NULL,
  teacher_run INTEGER REFERENCES runs(id) ON DELETE SET NULL,
  pid INTEGER,
  heartbeat REAL,
  run_dir TEXT);
CREATE INDEX runs_created ON runs(created);
CREATE INDEX runs_status ON runs(status);
CREATE TABLE metrics(
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  time REAL,
  loss REAL, lr REAL, grad_norm REAL, loss_scale REAL, tokens INTEGER, tokens_per_s REAL,
  step_ms REAL, skipped INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY(run_id, step)) WITHOUT ROWID;
CREATE TABLE evals(
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step INTEGER, time REAL, loss REAL, body TEXT);
CREATE INDEX evals_run ON evals(run_id, step);
CREATE TABLE memory_samples(
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  seq INTEGER, time REAL, step INTEGER, planned INTEGER NOT NULL DEFAULT 0,
  rank INTEGER NOT NULL, tier TEXT NOT NULL, category TEXT NOT NULL,
  current INTEGER NOT NULL DEFAULT 0, peak INTEGER NOT NULL DEFAULT 0);
CREATE INDEX memory_run ON memory_samples(run_id, seq);
CREATE TABLE kernel_summaries(
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  seq INTEGER, time REAL, window INTEGER, body TEXT);
CREATE INDEX kernel_summaries_run ON kernel_summaries(run_id, seq);
CREATE TABLE events(
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  seq INTEGER, time REAL, type TEXT NOT NULL, body TEXT);
CREATE INDEX events_run ON events(run_id, seq);
CREATE TABLE checkpoints(
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step INTEGER, time REAL, path TEXT NOT NULL, checksum TEXT);
CREATE INDEX checkpoints_run ON checkpoints(run_id, step);
CREATE TABLE artifacts(
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  kind TEXT NOT NULL, path TEXT NOT NULL, time REAL);
CREATE INDEX artifacts_run ON artifacts(run_id);
PRAGMA user_version=1;
)sql";

// v2: summary columns on runs (so listing 10,000 runs never touches the metrics) and the
// metric rollup pyramid (so a 1,000,000-step curve downsamples from a few thousand rows).
const char* kMigrateV1ToV2 = R"sql(
ALTER TABLE runs ADD COLUMN host TEXT;
ALTER TABLE runs ADD COLUMN reason TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN steps INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN last_step INTEGER;
ALTER TABLE runs ADD COLUMN last_loss REAL;
ALTER TABLE runs ADD COLUMN best_eval_loss REAL;
ALTER TABLE runs ADD COLUMN tokens_per_s REAL;
ALTER TABLE runs ADD COLUMN peak_memory INTEGER NOT NULL DEFAULT 0;
CREATE INDEX runs_run_dir ON runs(run_dir);
CREATE TABLE metric_rollup(
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  col INTEGER NOT NULL, level INTEGER NOT NULL, bucket INTEGER NOT NULL,
  mn REAL, mx REAL, sm REAL, n INTEGER NOT NULL, first_step INTEGER, last_step INTEGER,
  PRIMARY KEY(run_id, col, level, bucket)) WITHOUT ROWID;
UPDATE runs SET
  steps = (SELECT count(*) FROM metrics m WHERE m.run_id = runs.id),
  last_step = (SELECT max(step) FROM metrics m WHERE m.run_id = runs.id),
  last_loss = (SELECT loss FROM metrics m WHERE m.run_id = runs.id ORDER BY step DESC LIMIT 1),
  tokens_per_s = (SELECT tokens_per_s FROM metrics m WHERE m.run_id = runs.id
                  ORDER BY step DESC LIMIT 1),
  best_eval_loss = (SELECT min(loss) FROM evals e WHERE e.run_id = runs.id),
  peak_memory = coalesce((SELECT max(s) FROM (SELECT sum(peak) AS s FROM memory_samples ms
                  WHERE ms.run_id = runs.id AND planned = 0 AND tier = 'device'
                  GROUP BY seq, rank)), 0);
)sql";

// v3: stores before it read an eval's loss only from `loss`/`eval_loss`, while the engine sends
// `val_loss`, so every engine run's evals had no loss and "best eval loss" stayed empty. The
// eval bodies were kept whole: recover the losses from them.
const char* kMigrateV2ToV3 = R"sql(
UPDATE evals SET loss = coalesce(json_extract(body, '$.val_loss'), json_extract(body, '$.loss'),
                                 json_extract(body, '$.eval_loss'))
  WHERE loss IS NULL AND json_valid(body);
UPDATE runs SET best_eval_loss = (SELECT min(loss) FROM evals e WHERE e.run_id = runs.id);
)sql";

}  // namespace

void Db::migrate() {
  auto check = [this](int v) {
    if (v > kRunStoreSchemaVersion)
      throw StoreError(StoreError::Kind::TooNew,
                       "database " + path_ + " has schema version " + std::to_string(v) +
                           " but this Trainscope knows up to " +
                           std::to_string(kRunStoreSchemaVersion) + "; use a newer version");
  };
  auto empty = [this] {
    Stmt s(db_, "SELECT count(*) FROM sqlite_master");
    s.step();
    return s.i64(0) == 0;
  };
  // The version and the emptiness come from one statement, so one snapshot: read apart, a
  // creator committing between them showed a reader "version 0 but not empty".
  int v = 0;
  bool isEmpty = false;
  {
    Stmt s(db_,
           "SELECT (SELECT user_version FROM pragma_user_version), "
           "(SELECT count(*) FROM sqlite_master)");
    s.step();
    v = static_cast<int>(s.i64(0));
    isEmpty = s.i64(1) == 0;
  }
  check(v);
  if (v == kRunStoreSchemaVersion) return;
  if (readOnly_) {
    // An engine creating the file has not written its schema yet (or the file is empty): a
    // "locked" wait, which RunStore::open retries until the busy timeout, not a migration.
    if (v == 0 && isEmpty)
      throw StoreError(StoreError::Kind::Locked,
                       "database " + path_ +
                           " holds no run store yet (another process is creating it, or the "
                           "file is empty)");
    throw StoreError(StoreError::Kind::NeedsMigration,
                     "database " + path_ + " has schema version " + std::to_string(v) +
                         " (current " + std::to_string(kRunStoreSchemaVersion) +
                         "); open it read-write once to migrate it");
  }
  // Several processes may open a new or old file at once (engines started together): the
  // version is read again under the write lock, so exactly one of them creates or migrates.
  Transaction tx(*this);
  v = userVersion();
  check(v);
  if (v == kRunStoreSchemaVersion) {
    tx.commit();
    return;
  }
  // A version-0 file must be empty: never adopt someone else's database.
  if (v == 0 && !empty())
    throw StoreError(StoreError::Kind::Corrupt,
                     "database " + path_ + " is an SQLite file but not a Trainscope run store");
  if (v < 1) exec(kSchemaV1);
  if (v < 2) {
    exec(kMigrateV1ToV2);
    Stmt runs(db_, "SELECT run_id, min(step), max(step) FROM metrics GROUP BY run_id");
    while (runs.step()) updateRollups(*this, runs.i64(0), runs.i64(1), runs.i64(2));
    exec("PRAGMA user_version=2");
  }
  if (v < 3) {
    exec(kMigrateV2ToV3);
    exec("PRAGMA user_version=3");
  }
  tx.commit();
}

// ---------------------------------------------------------------------------------- tx

Transaction::Transaction(Db& db) : db_(db) {
  db_.exec("BEGIN IMMEDIATE");
}
Transaction::~Transaction() {
  if (!done_) sqlite3_exec(db_.handle(), "ROLLBACK", nullptr, nullptr, nullptr);
}
void Transaction::commit() {
  db_.exec("COMMIT");
  done_ = true;
}

}  // namespace ts::core::store
